#pragma once
// Rotary position embedding, rotate-half form (Hugging Face's
// apply_rotary_pos_emb): per head, with x1 = x[:d/2], x2 = x[d/2:],
//   out1 = x1*cos - x2*sin,  out2 = x2*cos + x1*sin,
// where cos/sin are of freqs = position * inv_freq, computed in f32 as HF does
// (inv_freq and positions as f32, their product in f32, then cos/sin in f32).
#include <cstdint>

namespace specpipe::kernels::cpu {

// RoPE parameters as plain values, so the kernel room does not depend on the
// model's config types.
struct rope_params {
  double theta = 10000.0;
  // 0: default, 1: linear (positions / factor), 2: llama3 frequency bands.
  int scaling = 0;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192.0;
};

// Writes head_dim/2 inverse frequencies: 1 / theta^(2i/head_dim) in f32, as
// HF's _compute_default_rope_parameters, then the configured scaling
// (HF _compute_linear_scaling_rope_parameters / _compute_llama3_parameters).
void rope_inv_freq(const rope_params& p, std::int64_t head_dim, float* inv_freq);

// cos/sin tables for n tokens: cos[t*half + i] = cos(float(positions[t]) * inv_freq[i]).
void rope_cos_sin(const std::int64_t* positions, std::int64_t n, const float* inv_freq,
                  std::int64_t half, float* cos_out, float* sin_out);

// Rotates x in place: x is [n, heads, head_dim] with token stride
// token_stride (elements) and heads contiguous inside a token; cos/sin are
// rope_cos_sin's tables (head_dim/2 per token).
void rope_apply(float* x, std::int64_t n, std::int64_t heads, std::int64_t head_dim,
                std::int64_t token_stride, const float* cos_t, const float* sin_t);

}  // namespace specpipe::kernels::cpu
