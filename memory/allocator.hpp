#pragma once
// Where bytes come from. One interface for host, pinned-host and device memory,
// so caches and stores are written once and handed the allocator they need.
// Only the owner of a resource (the KV store for pinned memory, the GPU worker
// for device memory) creates these allocators.
#include <cstddef>
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
