#include "kernels/cuda/device.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_check.hpp"

namespace specpipe::kernels::cuda {

device_properties query_device(int ordinal) {
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, ordinal));
  device_properties d;
  d.ordinal = ordinal;
  d.name = p.name;
  d.sm_count = p.multiProcessorCount;
  d.major = p.major;
  d.minor = p.minor;
  d.total_memory = p.totalGlobalMem;
  d.l2_bytes = std::size_t(p.l2CacheSize);
  d.max_smem_per_block_optin = p.sharedMemPerBlockOptin;
  return d;
}

void set_device(int ordinal) { CUDA_CHECK(cudaSetDevice(ordinal)); }
void device_synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

memory_info query_memory() {
  memory_info m;
  CUDA_CHECK(cudaMemGetInfo(&m.free, &m.total));
  return m;
}

stream::stream() {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  s_ = s;
}
stream::~stream() {
  if (s_) cudaStreamDestroy(as_stream(s_));
}
void stream::synchronize() const { CUDA_CHECK(cudaStreamSynchronize(as_stream(s_))); }

blas_handle::blas_handle() {
  cublasHandle_t h = nullptr;
  CUBLAS_CHECK(cublasCreate(&h));
  h_ = h;
  // 32 MiB: what cuBLAS recommends for Hopper so that no call allocates.
  constexpr std::size_t workspace_bytes = std::size_t(32) << 20;
  CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes));
  CUBLAS_CHECK(cublasSetWorkspace(h, workspace_, workspace_bytes));
}
blas_handle::~blas_handle() {
  if (h_) cublasDestroy(as_blas(h_));
  if (workspace_) cudaFree(workspace_);
}

event_timer::event_timer() {
  cudaEvent_t a = nullptr, b = nullptr;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  start_ = a;
  stop_ = b;
}
event_timer::~event_timer() {
  if (start_) cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  if (stop_) cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}
void event_timer::start(stream_t s) {
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(start_), as_stream(s)));
}
void event_timer::stop(stream_t s) {
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(stop_), as_stream(s)));
}
float event_timer::elapsed_ms() const {
  CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_),
                                  static_cast<cudaEvent_t>(stop_)));
  return ms;
}

stream_event::stream_event() {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  e_ = e;
}
stream_event::~stream_event() {
  if (e_) cudaEventDestroy(static_cast<cudaEvent_t>(e_));
}
stream_event::stream_event(stream_event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
void stream_event::record(stream_t s) { CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(e_), as_stream(s))); }
void stream_event::wait_on(stream_t s) const {
  CUDA_CHECK(cudaStreamWaitEvent(as_stream(s), static_cast<cudaEvent_t>(e_), 0));
}

timing_event::timing_event() {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreate(&e));
  e_ = e;
}
timing_event::~timing_event() {
  if (e_) cudaEventDestroy(static_cast<cudaEvent_t>(e_));
}
timing_event::timing_event(timing_event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
void timing_event::record(stream_t s) { CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(e_), as_stream(s))); }
float timing_event::ms_between(const timing_event& a, const timing_event& b) {
  CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(b.e_)));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(a.e_), static_cast<cudaEvent_t>(b.e_)));
  return ms;
}

graph::~graph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}
graph::graph(graph&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
graph& graph::operator=(graph&& o) noexcept {
  if (this != &o) {
    if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    exec_ = std::exchange(o.exec_, nullptr);
  }
  return *this;
}
void graph::begin_capture(stream_t s) {
  CUDA_CHECK(cudaStreamBeginCapture(as_stream(s), cudaStreamCaptureModeThreadLocal));
}
graph graph::end_capture(stream_t s) {
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(as_stream(s), &g));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  CUDA_CHECK(e);
  graph out;
  out.exec_ = exec;
  return out;
}
void graph::launch(stream_t s) const {
  CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), as_stream(s)));
}

void copy_to_device(void* dst, const void* src, std::size_t bytes, stream_t s) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, as_stream(s)));
}
void copy_to_host(void* dst, const void* src, std::size_t bytes, stream_t s) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, as_stream(s)));
}
void copy_on_device(void* dst, const void* src, std::size_t bytes, stream_t s) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, as_stream(s)));
}
void copy_rows_on_device(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t width,
                         std::size_t rows, stream_t s) {
  CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice, as_stream(s)));
}
void fill_bytes(void* dst, int value, std::size_t bytes, stream_t s) {
  CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, as_stream(s)));
}

double measure_copy_bandwidth(std::size_t bytes, int repeats) {
  void* a = nullptr;
  void* b = nullptr;
  CUDA_CHECK(cudaMalloc(&a, bytes));
  const cudaError_t eb = cudaMalloc(&b, bytes);
  if (eb != cudaSuccess) cudaFree(a);
  CUDA_CHECK(eb);
  std::vector<float> ms;
  try {
    stream st;
    event_timer t;
    // Non-zero contents: some copies of zeros have run faster than real data.
    CUDA_CHECK(cudaMemsetAsync(a, 0x5a, bytes, as_stream(st.get())));
    for (int i = 0; i < 3; ++i)
      CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, as_stream(st.get())));
    for (int i = 0; i < std::max(1, repeats); ++i) {
      t.start(st.get());
      CUDA_CHECK(cudaMemcpyAsync((i & 1) ? a : b, (i & 1) ? b : a, bytes, cudaMemcpyDeviceToDevice,
                                 as_stream(st.get())));
      t.stop(st.get());
      ms.push_back(t.elapsed_ms());
    }
  } catch (...) {
    cudaFree(a);
    cudaFree(b);
    throw;
  }
  cudaFree(a);
  cudaFree(b);
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  return 2.0 * double(bytes) / (med * 1e-3);
}

}  // namespace specpipe::kernels::cuda
