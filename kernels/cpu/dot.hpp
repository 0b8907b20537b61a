#pragma once
// The f32 dot product every CPU attention kernel scores with: eight partial
// sums in a fixed order, so g++ -O3 vectorizes it and the full-precision and
// quantized kernels round identically (their outputs are compared bit for bit
// in places).
#include <cstdint>

namespace specpipe::kernels::cpu {

inline float dot(const float* a, const float* b, std::int64_t d) {
  float acc[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= d; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  for (int j = 0; i + j < d; ++j) acc[j] += a[i + j] * b[i + j];
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

}  // namespace specpipe::kernels::cpu
