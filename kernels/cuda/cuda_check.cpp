#include "kernels/cuda/cuda_error.hpp"

#include <string>

namespace specpipe::kernels::cuda {

void throw_cuda_error(const char* file, int line, const char* statement, const std::string& what) {
  throw cuda_error(std::string(file) + ":" + std::to_string(line) + ": " + statement +
                   " failed: " + what);
}

}  // namespace specpipe::kernels::cuda
