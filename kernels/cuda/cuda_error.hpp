#pragma once
// The one error type for failures of the CUDA runtime, cuBLAS or a kernel
// launch, and the one function every check routes through. Plain C++: safe to
// include from code that is compiled without CUDA.
#include <stdexcept>
#include <string>

namespace specpipe::kernels::cuda {

class cuda_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws cuda_error("FILE:LINE: STATEMENT failed: WHAT").
[[noreturn]] void throw_cuda_error(const char* file, int line, const char* statement,
                                   const std::string& what);

// A cudaStream_t in headers that must not include CUDA (nullptr = the legacy
// default stream).
using stream_t = void*;
// A cublasHandle_t, likewise opaque.
using blas_handle_t = void*;

}  // namespace specpipe::kernels::cuda
