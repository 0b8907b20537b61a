#pragma once
// RMSNorm as in Hugging Face's LlamaRMSNorm:
//   y = weight * (x * rsqrt(mean(x^2) + eps))
// over the last dimension, in f32; weight is f32, f16 or bf16.
#include <cstdint>

#include "memory/dtype.hpp"

namespace specpipe::kernels::cpu {

// x, y: [n, dim] contiguous (y may alias x). Throws std::invalid_argument on a
// non-float weight dtype.
void rms_norm(const float* x, std::int64_t n, std::int64_t dim, const void* weight, dtype w_type,
              float eps, float* y);

// The residual stream's step between sub-layers: residual += delta, then
// y = rms_norm(residual). residual, delta, y: [n, dim]; y must not alias
// residual (it may alias delta).
void add_rms_norm(float* residual, const float* delta, std::int64_t n, std::int64_t dim,
                  const void* weight, dtype w_type, float eps, float* y);

}  // namespace specpipe::kernels::cpu
