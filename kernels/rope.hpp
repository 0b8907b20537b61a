#pragma once
// Rotary position embedding, rotate-half form (Hugging Face's
// apply_rotary_pos_emb): per head, with x1 = x[:d/2], x2 = x[d/2:],
//   out1 = x1*cos - x2*sin,  out2 = x2*cos + x1*sin,
// where cos/sin are of freqs = position * inv_freq, computed in f32 as HF does
// (inv_freq and positions as f32, their product in f32, then cos/sin in f32).
#include <cstdint>

namespace specpipe::kernels::cpu {

// The inverse-frequency table (head_dim/2 values, scaling applied) comes from
// the model config: model/config.hpp rope_inv_freq, checked against transformers.

// cos/sin tables for n tokens: cos[t*half + i] = cos(float(positions[t]) * inv_freq[i]).
void rope_cos_sin(const std::int64_t* positions, std::int64_t n, const float* inv_freq,
                  std::int64_t half, float* cos_out, float* sin_out);

// Rotates x in place: x is [n, heads, head_dim] with token stride
// token_stride (elements) and heads contiguous inside a token; cos/sin are
// rope_cos_sin's tables (head_dim/2 per token).
void rope_apply(float* x, std::int64_t n, std::int64_t heads, std::int64_t head_dim,
                std::int64_t token_stride, const float* cos_t, const float* sin_t);

}  // namespace specpipe::kernels::cpu
