// The CUDA transfer backend (CUDA builds only). The engine's own stream runs
// each gather: long contiguous runs by the copy engines, the rest by the
// zero-copy kernel reading mapped pinned host memory
// (kernels::cuda::gather_request runs a request; kernels::gather_policy holds
// the rule and the kernel's shape). Completion is a CUDA event recorded on that stream; the
// worker's stream waits on it. Plain C++ over the runtime API: no CAF here.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "actors/transfer_backend.hpp"
#include "kernels/gather.hpp"
#include "memory/allocator.hpp"

namespace specpipe {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("transfer engine: ") + what + ": " + cudaGetErrorString(e));
}

class cuda_transfer_backend final : public transfer_backend {
 public:
  explicit cuda_transfer_backend(int device) : device_(device), alloc_(make_device_allocator(device)) {
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~cuda_transfer_backend() override {
    if (scratch_.index_dev) cudaFree(scratch_.index_dev);
    if (scratch_.index_host) cudaFreeHost(scratch_.index_host);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda:" + std::to_string(device_); }

  std::shared_ptr<buffer> staging(std::size_t bytes) override { return std::make_shared<buffer>(*alloc_, bytes); }

  void gather(const gather_source& src, void* dst, transfer_event& done) override {
    check(cudaSetDevice(device_), "cudaSetDevice");
    reserve_index(2 * src.rows.size());
    void* src_dev = pinned_device_pointer(const_cast<std::byte*>(src.base));
    check(cudaError_t(kernels::cuda::gather_request(src.base, src_dev, src.row_bytes, src.rows, dst, stream_, policy_,
                                                    scratch_)),
          "gather");
    cudaEvent_t ev;
    check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(ev, stream_), "cudaEventRecord");
    done.cuda_event = ev;
    done.complete();
    // The store's lease (and the index buffer) must outlive the reads; this
    // thread is the engine's own, so waiting here blocks no one else.
    check(cudaEventSynchronize(ev), "cudaEventSynchronize");
  }

 private:
  void reserve_index(std::size_t n) {
    if (n <= scratch_.capacity) return;
    if (scratch_.index_dev) cudaFree(scratch_.index_dev);
    if (scratch_.index_host) cudaFreeHost(scratch_.index_host);
    scratch_.index_dev = nullptr;
    scratch_.index_host = nullptr;
    scratch_.capacity = 0;
    check(cudaMalloc(reinterpret_cast<void**>(&scratch_.index_dev), n * sizeof(std::int64_t)),
          "cudaMalloc (row indices)");
    check(cudaHostAlloc(reinterpret_cast<void**>(&scratch_.index_host), n * sizeof(std::int64_t), cudaHostAllocDefault),
          "cudaHostAlloc (row indices)");
    scratch_.capacity = n;
  }

  int device_;
  std::unique_ptr<allocator> alloc_;
  cudaStream_t stream_ = nullptr;
  kernels::gather_policy policy_{};
  kernels::cuda::gather_scratch scratch_{};
};

}  // namespace

std::unique_ptr<transfer_backend> make_cuda_transfer_backend(int device) {
  if (!cuda_available()) throw std::runtime_error("transfer engine: no CUDA device visible");
  return std::make_unique<cuda_transfer_backend>(device);
}

}  // namespace specpipe
