#pragma once
// Dense projection y[n, out] = x[n, in] * W[out, in]^T, the layout of a Hugging
// Face nn.Linear weight (out_features x in_features). W is f32, f16 or bf16 and
// is widened on the fly; accumulation is f32.
#include <cstdint>

#include "memory/dtype.hpp"

namespace specpipe::kernels::cpu {

class thread_pool;

struct linear_args {
  const float* x = nullptr;    // [n, in], row stride x_stride
  std::int64_t x_stride = 0;   // elements; 0 means `in`
  const void* w = nullptr;     // [out, in], row stride w_stride, dtype w_type
  dtype w_type = dtype::f32;
  std::int64_t w_stride = 0;   // elements; 0 means `in`
  float* y = nullptr;          // [n, out], row stride y_stride
  std::int64_t y_stride = 0;   // elements; 0 means `out`
  std::int64_t n = 0;
  std::int64_t in = 0;
  std::int64_t out = 0;
};

// Parallel over output rows on `pool` (inline when null). Each output element
// is summed in the same order whatever n is, so a token's row of y is bitwise
// identical whether it is computed alone (decode) or in a batch (prefill).
// Throws std::invalid_argument on a non-float weight dtype or bad sizes.
void linear(const linear_args& a, thread_pool* pool = nullptr);

}  // namespace specpipe::kernels::cpu
