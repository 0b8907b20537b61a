#pragma once
// Where bytes come from. One interface for host, pinned-host and device memory,
// so caches and stores are written once and handed the allocator they need.
// Only the owner of a resource (the KV store for pinned memory, the GPU worker
// for device memory) creates these allocators.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "memory/tensor.hpp"

namespace specpipe {

class allocator {
 public:
  virtual ~allocator() = default;
  // Returns memory aligned to at least 256 bytes, or throws std::bad_alloc /
  // memory_error with the size asked for.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
  virtual memory_kind kind() const = 0;
  virtual int device() const { return -1; }
};

class memory_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Plain host memory (aligned operator new). Process-wide, thread-safe.
allocator& host_allocator();

// True when this build has CUDA and at least one device is visible.
bool cuda_available();

// Page-locked host memory (cudaHostAlloc, mapped for zero-copy reads) when a
// GPU is present; plain host memory otherwise, so the CPU backend runs the
// same code paths.
std::unique_ptr<allocator> make_pinned_allocator();

// How pinned memory is backed by host pages. A zero-copy gather of scattered
// rows out of a multi-GiB arena pays one address translation (GPU TLB, and the
// host IOMMU where it translates) per 4 KiB page it touches; 2 MiB pages cut
// the pages a random gather touches by up to 512x (kernels/cuda/NOTES.md,
// "Sparse gather").
enum class pinned_pages : std::uint8_t {
  driver,       // cudaHostAlloc: whatever pages the driver takes (4 KiB)
  transparent,  // mmap + madvise(MADV_HUGEPAGE) + cudaHostRegister: 2 MiB
                // transparent huge pages where the kernel grants them
  hugetlb,      // mmap(MAP_HUGETLB) + cudaHostRegister: reserved 2 MiB pages;
                // falls back to `transparent` when none are reserved
  pool,         // a stream-ordered pool on host NUMA node 0 (cudaMemPoolCreate,
                // cudaMemLocationTypeHostNuma), readable by every device: the
                // driver maps it through its virtual memory manager in 2 MiB
                // chunks; falls back to `driver` where pools cannot be on the host
};

const char* pinned_pages_name(pinned_pages p);

// The address a kernel on the current device reads pinned memory `p` by:
// cudaHostGetDevicePointer for host-allocated or registered memory, `p`
// itself for pool memory (one virtual address on host and device). `p`
// itself without CUDA. Throws memory_error for memory the device cannot read.
void* pinned_device_pointer(void* p);

// As make_pinned_allocator(), with the backing asked for. Huge-page requests
// fall back cleanly (hugetlb -> transparent -> driver) when the kernel or the
// driver refuses; huge_page_fraction() tells what an allocation really got.
// Without a GPU this is plain host memory, as above.
std::unique_ptr<allocator> make_pinned_allocator(pinned_pages pages);

// Share of [p, p + bytes) backed by huge pages (transparent or hugetlb),
// from /proc/self/smaps; 0 for driver-allocated memory, -1 where it cannot be
// read (not Linux, no procfs).
double huge_page_fraction(const void* p, std::size_t bytes);

// CUDA devices visible to this process (0 in a build or on a machine
// without CUDA).
int cuda_device_count();

// Device memory on CUDA ordinal `device`; throws memory_error in a build or on
// a machine without CUDA.
std::unique_ptr<allocator> make_device_allocator(int device);

// Owning, movable allocation from an allocator.
class buffer {
 public:
  buffer() = default;
  buffer(allocator& a, std::size_t bytes);
  ~buffer();
  buffer(buffer&& o) noexcept;
  buffer& operator=(buffer&& o) noexcept;
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;

  void* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  template <class T>
  T* as() const { return static_cast<T*>(data_); }
  memory_kind kind() const;

 private:
  void release() noexcept;
  allocator* alloc_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace specpipe
