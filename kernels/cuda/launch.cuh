#pragma once
// One launch path for kernels that may run as programmatic dependents (CUDA
// PDL, sm_90) of the kernel before them on the stream. A dependent launch
// lets the kernel's blocks be scheduled while its predecessor drains, so the
// launch latency (a few microseconds per kernel, paid ~10 times per layer at
// batch 1) overlaps the predecessor's tail. The kernel must call
// detail::grid_dependency_wait() in every block before it reads anything the
// predecessor writes (or writes what the predecessor reads): that is what
// keeps the stream's order. CUDA-only (included from .cu files).
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda/cuda_check.hpp"

namespace specpipe::kernels::cuda::detail {

template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t s, bool dependent,
                   Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = dependent ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (e != cudaSuccess) {
    // A refused launch (bad shape, too much shared memory) is not sticky:
    // clear it, so the next launch's check does not report it again.
    (void)cudaGetLastError();
    throw_cuda_error(__FILE__, __LINE__, "cudaLaunchKernelEx", cudaGetErrorString(e));
  }
}

}  // namespace specpipe::kernels::cuda::detail
