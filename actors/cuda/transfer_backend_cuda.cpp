// The CUDA transfer backend (CUDA builds only). The engine's own stream runs
// each gather: long contiguous runs by cudaMemcpyAsync, the rest by the
// zero-copy kernel reading mapped pinned host memory (kernels::plan_gather
// holds the rule). Completion is a CUDA event recorded on that stream; the
// worker's stream waits on it. Plain C++ over the runtime API: no CAF here.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "actors/transfer_backend.hpp"
#include "kernels/gather.hpp"

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
    if (index_dev_) cudaFree(index_dev_);
    if (index_host_) cudaFreeHost(index_host_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda:" + std::to_string(device_); }

  std::shared_ptr<buffer> staging(std::size_t bytes) override { return std::make_shared<buffer>(*alloc_, bytes); }

  void gather(const gather_source& src, void* dst, transfer_event& done) override {
    check(cudaSetDevice(device_), "cudaSetDevice");
    const auto plan = kernels::plan_gather(src.rows, src.row_bytes);
    auto* d = static_cast<std::byte*>(dst);
    for (const auto& r : plan.copy_runs)
      check(cudaMemcpyAsync(d + std::size_t(r.dst_row) * src.row_bytes, src.base + std::size_t(r.src_row) * src.row_bytes,
                            std::size_t(r.count) * src.row_bytes, cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync");
    if (const std::size_t n = plan.kernel_rows.size(); n > 0) {
      reserve_index(2 * n);
      std::copy(plan.kernel_rows.begin(), plan.kernel_rows.end(), index_host_);
      std::copy(plan.kernel_dst.begin(), plan.kernel_dst.end(), index_host_ + n);
      check(cudaMemcpyAsync(index_dev_, index_host_, 2 * n * sizeof(std::int64_t), cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync (row indices)");
      void* src_dev = nullptr;
      check(cudaHostGetDevicePointer(&src_dev, const_cast<std::byte*>(src.base), 0), "cudaHostGetDevicePointer");
      check(cudaError_t(kernels::cuda::gather_rows(src_dev, src.row_bytes, index_dev_, index_dev_ + n,
                                                   std::int64_t(n), dst, stream_)),
            "gather kernel");
    }
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
    if (n <= index_cap_) return;
    if (index_dev_) cudaFree(index_dev_);
    if (index_host_) cudaFreeHost(index_host_);
    index_dev_ = nullptr;
    index_host_ = nullptr;
    check(cudaMalloc(reinterpret_cast<void**>(&index_dev_), n * sizeof(std::int64_t)), "cudaMalloc (row indices)");
    check(cudaHostAlloc(reinterpret_cast<void**>(&index_host_), n * sizeof(std::int64_t), cudaHostAllocDefault),
          "cudaHostAlloc (row indices)");
    index_cap_ = n;
  }

  int device_;
  std::unique_ptr<allocator> alloc_;
  cudaStream_t stream_ = nullptr;
  std::int64_t* index_dev_ = nullptr;
  std::int64_t* index_host_ = nullptr;
  std::size_t index_cap_ = 0;
};

}  // namespace

std::unique_ptr<transfer_backend> make_cuda_transfer_backend(int device) {
  if (!cuda_available()) throw std::runtime_error("transfer engine: no CUDA device visible");
  return std::make_unique<cuda_transfer_backend>(device);
}

}  // namespace specpipe
