#pragma once
// CUDA_CHECK / CUBLAS_CHECK for the CUDA translation units of kernels/cuda and
// memory/cuda. Includes the CUDA runtime: never include this from a public
// header that plain C++ code sees.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_error.hpp"

#define CUDA_CHECK(stmt)                                                                  \
  do {                                                                                    \
    const cudaError_t specpipe_e_ = (stmt);                                               \
    if (specpipe_e_ != cudaSuccess)                                                       \
      ::specpipe::kernels::cuda::throw_cuda_error(__FILE__, __LINE__, #stmt,              \
                                                  cudaGetErrorString(specpipe_e_));       \
  } while (0)

#define CUBLAS_CHECK(stmt)                                                                \
  do {                                                                                    \
    const cublasStatus_t specpipe_s_ = (stmt);                                            \
    if (specpipe_s_ != CUBLAS_STATUS_SUCCESS)                                             \
      ::specpipe::kernels::cuda::throw_cuda_error(__FILE__, __LINE__, #stmt,              \
                                                  cublasGetStatusString(specpipe_s_));    \
  } while (0)

// After every kernel launch: catches bad launch configurations at the call site.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace specpipe::kernels::cuda {

inline cudaStream_t as_stream(stream_t s) { return static_cast<cudaStream_t>(s); }
inline cublasHandle_t as_blas(blas_handle_t h) { return static_cast<cublasHandle_t>(h); }

}  // namespace specpipe::kernels::cuda
