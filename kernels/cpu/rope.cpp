#include "kernels/rope.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace specpipe::kernels::cpu {

void rope_inv_freq(const rope_params& p, std::int64_t head_dim, float* inv_freq) {
  if (head_dim <= 0 || head_dim % 2 != 0)
    throw std::invalid_argument("rope_inv_freq: head_dim must be positive and even, got " +
                                std::to_string(head_dim));
  const std::int64_t half = head_dim / 2;
  for (std::int64_t i = 0; i < half; ++i) {
    // HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in f32.
    const float expo = float(2 * i) / float(head_dim);
    const float f = 1.0f / std::pow(float(p.theta), expo);
    inv_freq[i] = f;
  }
  if (p.scaling == 1) {
    // Linear scaling divides positions by factor; equivalently inv_freq.
    for (std::int64_t i = 0; i < half; ++i) inv_freq[i] = inv_freq[i] / float(p.factor);
  } else if (p.scaling == 2) {
    // Llama-3.1 (HF _compute_llama3_parameters): wavelengths longer than
    // old_ctx/low_freq_factor are slowed by `factor`, shorter than
    // old_ctx/high_freq_factor are kept, the band between is interpolated.
    const double old_ctx = p.original_max_position_embeddings;
    const double low_wavelen = old_ctx / p.low_freq_factor;
    const double high_wavelen = old_ctx / p.high_freq_factor;
    for (std::int64_t i = 0; i < half; ++i) {
      const float f = inv_freq[i];
      const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
      float out = f;
      if (wavelen > float(low_wavelen)) out = f / float(p.factor);
      if (!(wavelen < float(high_wavelen)) && !(wavelen > float(low_wavelen))) {
        const float smooth = (float(old_ctx) / wavelen - float(p.low_freq_factor)) /
                             float(p.high_freq_factor - p.low_freq_factor);
        out = (1.0f - smooth) * (f / float(p.factor)) + smooth * f;
      }
      inv_freq[i] = out;
    }
  } else if (p.scaling != 0) {
    throw std::invalid_argument("rope_inv_freq: unknown scaling kind " + std::to_string(p.scaling));
  }
}

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
