#include "kernels/rope.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace specpipe::kernels::cpu {

void rope_cos_sin(const std::int64_t* positions, std::int64_t n, const float* inv_freq,
                  std::int64_t half, float* cos_out, float* sin_out) {
  for (std::int64_t t = 0; t < n; ++t) {
    const float pos = float(positions[t]);
    for (std::int64_t i = 0; i < half; ++i) {
      const float freq = pos * inv_freq[i];
      cos_out[t * half + i] = std::cos(freq);
      sin_out[t * half + i] = std::sin(freq);
    }
  }
}

void rope_apply(float* x, std::int64_t n, std::int64_t heads, std::int64_t head_dim,
                std::int64_t token_stride, const float* cos_t, const float* sin_t) {
  const std::int64_t half = head_dim / 2;
  for (std::int64_t t = 0; t < n; ++t) {
    const float* c = cos_t + t * half;
    const float* s = sin_t + t * half;
    for (std::int64_t h = 0; h < heads; ++h) {
      float* x1 = x + t * token_stride + h * head_dim;
      float* x2 = x1 + half;
      for (std::int64_t i = 0; i < half; ++i) {
        const float a = x1[i];
        const float b = x2[i];
        x1[i] = a * c[i] - b * s[i];
        x2[i] = b * c[i] + a * s[i];
      }
    }
  }
}

}  // namespace specpipe::kernels::cpu
