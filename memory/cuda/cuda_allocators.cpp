// Pinned-host and device allocators over the CUDA runtime. Compiled only in
// CUDA builds; plain C++ against the runtime API, no kernels.
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "memory/allocator.hpp"

namespace specpipe {
namespace {

[[noreturn]] void fail(const char* what, cudaError_t e, std::size_t bytes) {
  throw memory_error(std::string(what) + " of " + std::to_string(bytes) +
                     " bytes failed: " + cudaGetErrorString(e));
}

class pinned_allocator final : public allocator {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    // Mapped so the gather kernel can read rows straight from host memory.
    cudaError_t e = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) fail("cudaHostAlloc", e, bytes);
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept override { cudaFreeHost(p); }
  memory_kind kind() const override { return memory_kind::pinned; }
};

// Huge-page-backed pinned memory: the pages come from mmap (2 MiB-aligned,
// rounded up to whole 2 MiB pages) and are then page-locked and mapped for the
// GPU by cudaHostRegister. Nothing is remembered per allocation: the size is
// rounded the same way on the way back, and cudaHostUnregister failing tells
// the cudaHostAlloc fallback apart.
class huge_pinned_allocator final : public allocator {
 public:
  explicit huge_pinned_allocator(pinned_pages pages) : pages_(pages) {}

  void* allocate(std::size_t bytes) override {
    const std::size_t len = rounded(bytes);
    void* p = nullptr;
#ifdef MAP_HUGETLB
    if (pages_ == pinned_pages::hugetlb)
      p = map(len, MAP_HUGETLB | huge_2mb_flag());  // fails (ENOMEM) when no pages are reserved
#endif
    if (!p) {
      p = map(len, 0);
#ifdef MADV_HUGEPAGE
      // Ignored where THP is off; the memory is then simply 4 KiB pages.
      if (p) madvise(p, len, MADV_HUGEPAGE);
#endif
    }
    if (p) {
      const cudaError_t e = cudaHostRegister(p, len, cudaHostRegisterMapped | cudaHostRegisterPortable);
      if (e == cudaSuccess) return p;
      cudaGetLastError();  // not sticky; clear it and fall back
      munmap(p, len);
    }
    void* q = nullptr;
    const cudaError_t e = cudaHostAlloc(&q, bytes == 0 ? 1 : bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) fail("cudaHostAlloc", e, bytes);
    return q;
  }

  void deallocate(void* p, std::size_t bytes) noexcept override {
    if (!p) return;
    if (cudaHostUnregister(p) == cudaSuccess) {
      munmap(p, rounded(bytes));
    } else {
      cudaGetLastError();
      cudaFreeHost(p);  // the cudaHostAlloc fallback
    }
  }
  memory_kind kind() const override { return memory_kind::pinned; }

 private:
  static constexpr std::size_t huge = std::size_t(2) << 20;
  static std::size_t rounded(std::size_t bytes) { return (bytes == 0 ? huge : (bytes + huge - 1) / huge * huge); }
  static int huge_2mb_flag() {
#ifdef MAP_HUGE_2MB
    return MAP_HUGE_2MB;
#else
    return 21 << 26;  // MAP_HUGE_SHIFT 26, log2(2 MiB)
#endif
  }
  // A 2 MiB-aligned private anonymous mapping of `len` bytes, or null. THP
  // only backs 2 MiB-aligned ranges, so map one huge page more and trim.
  static void* map(std::size_t len, int extra_flags) {
    if (extra_flags != 0) {
      void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
      return p == MAP_FAILED ? nullptr : p;
    }
    void* raw = mmap(nullptr, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const auto a = reinterpret_cast<std::uintptr_t>(raw);
    const auto aligned = (a + huge - 1) / huge * huge;
    if (aligned > a) munmap(raw, aligned - a);
    if (const std::size_t tail = a + len + huge - (aligned + len); tail > 0)
      munmap(reinterpret_cast<void*>(aligned + len), tail);
    return reinterpret_cast<void*>(aligned);
  }

  pinned_pages pages_;
};

// Pinned memory from a stream-ordered pool located on host NUMA node 0 and
// made readable by every device. The driver backs such a pool through its
// virtual memory manager in 2 MiB chunks, where cudaHostAlloc pins 4 KiB
// pages one by one: whether the GPU then translates random rows more cheaply
// is what the gather bench's `pool` arena measures. Where the pool cannot be
// created (no host pools on this driver), every allocation is cudaHostAlloc.
class pool_pinned_allocator final : public allocator {
 public:
  pool_pinned_allocator() {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeHostNuma;
    props.location.id = 0;
    if (cudaMemPoolCreate(&pool_, &props) != cudaSuccess) {
      cudaGetLastError();
      pool_ = nullptr;
      return;
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    std::vector<cudaMemAccessDesc> access(std::size_t(std::max(n, 0)));
    for (int d = 0; d < n; ++d) {
      access[std::size_t(d)].location.type = cudaMemLocationTypeDevice;
      access[std::size_t(d)].location.id = d;
      access[std::size_t(d)].flags = cudaMemAccessFlagsProtReadWrite;
    }
    if (n == 0 || cudaMemPoolSetAccess(pool_, access.data(), access.size()) != cudaSuccess) {
      cudaGetLastError();
      cudaMemPoolDestroy(pool_);
      pool_ = nullptr;
    }
  }
  ~pool_pinned_allocator() override {
    if (pool_) cudaMemPoolDestroy(pool_);
  }
  pool_pinned_allocator(const pool_pinned_allocator&) = delete;
  pool_pinned_allocator& operator=(const pool_pinned_allocator&) = delete;

  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    const std::size_t n = bytes == 0 ? 1 : bytes;
    if (!pool_) {
      const cudaError_t e = cudaHostAlloc(&p, n, cudaHostAllocMapped | cudaHostAllocPortable);
      if (e != cudaSuccess) fail("cudaHostAlloc", e, bytes);
      return p;
    }
    // Stream-ordered on the legacy stream, then waited for: an allocator
    // hands out memory that is ready.
    cudaError_t e = cudaMallocFromPoolAsync(&p, n, pool_, cudaStreamLegacy);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cudaStreamLegacy);
    if (e != cudaSuccess) fail("cudaMallocFromPoolAsync (host pool)", e, bytes);
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept override {
    if (!p) return;
    if (!pool_) {
      cudaFreeHost(p);
      return;
    }
    cudaFreeAsync(p, cudaStreamLegacy);
    cudaStreamSynchronize(cudaStreamLegacy);
  }
  memory_kind kind() const override { return memory_kind::pinned; }

 private:
  cudaMemPool_t pool_ = nullptr;
};

class plain_pinned_allocator final : public allocator {
 public:
  void* allocate(std::size_t bytes) override { return host_allocator().allocate(bytes); }
  void deallocate(void* p, std::size_t n) noexcept override { host_allocator().deallocate(p, n); }
  memory_kind kind() const override { return memory_kind::pinned; }
};

class device_allocator final : public allocator {
 public:
  explicit device_allocator(int device) : device_(device) {}
  void* allocate(std::size_t bytes) override {
    cudaError_t e = cudaSetDevice(device_);
    if (e != cudaSuccess) fail("cudaSetDevice", e, bytes);
    void* p = nullptr;
    e = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
    if (e != cudaSuccess) fail("cudaMalloc", e, bytes);
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept override { cudaFree(p); }
  memory_kind kind() const override { return memory_kind::device; }
  int device() const override { return device_; }

 private:
  int device_;
};

}  // namespace

bool cuda_available() {
  static const bool available = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  }();
  return available;
}

std::unique_ptr<allocator> make_pinned_allocator() {
  if (cuda_available()) return std::make_unique<pinned_allocator>();
  return std::make_unique<plain_pinned_allocator>();
}

std::unique_ptr<allocator> make_pinned_allocator(pinned_pages pages) {
  if (!cuda_available()) return std::make_unique<plain_pinned_allocator>();
  if (pages == pinned_pages::driver) return std::make_unique<pinned_allocator>();
  if (pages == pinned_pages::pool) return std::make_unique<pool_pinned_allocator>();
  return std::make_unique<huge_pinned_allocator>(pages);
}

void* pinned_device_pointer(void* p) {
  if (!cuda_available()) return p;
  void* d = nullptr;
  if (cudaHostGetDevicePointer(&d, p, 0) == cudaSuccess) return d;
  cudaGetLastError();
  cudaPointerAttributes at{};
  if (cudaPointerGetAttributes(&at, p) == cudaSuccess && at.devicePointer) return at.devicePointer;
  cudaGetLastError();
  throw memory_error("pinned_device_pointer: the device cannot read host memory at this address");
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::unique_ptr<allocator> make_device_allocator(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n)
    throw memory_error("CUDA device " + std::to_string(device) + " requested, but " +
                       std::to_string(n) + " device(s) are visible");
  return std::make_unique<device_allocator>(device);
}

}  // namespace specpipe
