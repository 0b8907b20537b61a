// The CUDA side of transfer_event (CUDA builds only): a worker stream waits
// on the copy stream's event without blocking any host thread.
#include <cuda_runtime_api.h>

#include <string>

namespace specpipe {

std::string cuda_stream_wait_event(void* stream, void* event) {
  const cudaError_t e = cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0);
  return e == cudaSuccess ? std::string() : std::string("cudaStreamWaitEvent: ") + cudaGetErrorString(e);
}

void cuda_event_destroy(void* event) noexcept { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

}  // namespace specpipe
