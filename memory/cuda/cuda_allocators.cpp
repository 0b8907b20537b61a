// Pinned-host and device allocators over the CUDA runtime. Compiled only in
// CUDA builds; plain C++ against the runtime API, no kernels.
#include <cuda_runtime_api.h>

#include <string>

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

std::unique_ptr<allocator> make_device_allocator(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n)
    throw memory_error("CUDA device " + std::to_string(device) + " requested, but " +
                       std::to_string(n) + " device(s) are visible");
  return std::make_unique<device_allocator>(device);
}

}  // namespace specpipe
