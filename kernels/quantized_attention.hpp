#pragma once
// Causal grouped-query decode attention straight over a packed low-bit KV
// cache (memory/kv_layout.hpp) followed by a full-precision window:
//   positions 0 .. n_quant-1       packed codes, dequantized inside the loops
//   positions n_quant .. +win_len-1 f32 rows of the window
// Query i (at position pos0 + i) attends to positions 0 .. pos0 + i, and query
// head h reads KV head h / (n_heads / n_kv_heads), as in kernels/attention.hpp.
//
// Dequantization is fused: for a key group with per-channel scale s_c and zero
// z_c, q . k^_t = sum_c q_c z_c + sum_c (q_c s_c) code_ct, so the group costs one
// pass over its codes and no dequantized copy is ever formed; values accumulate
// p_t z_g + (p_t s_g) code_tc per value group. Softmax is the online,
// max-subtracted form of kernels/attention.hpp.
#include <cstdint>

namespace specpipe::kernels::cpu {

class thread_pool;

// The packed part of one layer. Pointers follow kv_layout's order: key blocks
// [group][kv_head], value rows [token][kv_head].
struct packed_kv {
  int bits = 2;                 // bits per code of the upper (or only) plane
  std::int64_t group = 64;      // G, tokens per key group
  std::int64_t value_group = 64;  // Gv, channels per value group
  std::int64_t n_tokens = 0;    // quantized positions, a multiple of G
  const std::uint8_t* k_codes = nullptr;
  const std::uint8_t* k_lower = nullptr;  // hier residual plane; null: INT4 (upper-only) read
  const std::uint16_t* k_scale = nullptr;  // f16 [group][kv_head][head_dim]
  const std::uint16_t* k_zero = nullptr;
  const std::uint8_t* v_codes = nullptr;
  const std::uint8_t* v_lower = nullptr;
  const std::uint16_t* v_scale = nullptr;  // f16 [token][kv_head][value groups]
  const std::uint16_t* v_zero = nullptr;
};

struct quantized_attention_args {
  const float* q = nullptr;     // [n, n_heads, head_dim], token stride q_stride
  std::int64_t q_stride = 0;    // 0: n_heads * head_dim
  float* out = nullptr;         // [n, n_heads, head_dim], token stride out_stride
  std::int64_t out_stride = 0;  // 0: n_heads * head_dim
  std::int64_t n = 0;
  std::int64_t pos0 = 0;
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;
  std::int64_t head_dim = 0;
  packed_kv kv;
  const float* win_k = nullptr;  // [win_len, n_kv_heads, head_dim]
  const float* win_v = nullptr;
  std::int64_t win_len = 0;
  // Optional: softmax probabilities, probs[(i * n_heads + h) * probs_stride + j]
  // for j = 0 .. pos0 + i (entries past that are left untouched).
  float* probs = nullptr;
  std::int64_t probs_stride = 0;
};

// Parallel over (query, head) on `pool` (inline when null). Throws
// std::invalid_argument on inconsistent shapes or when positions
// pos0 .. pos0+n-1 are not all stored.
void quantized_attention(const quantized_attention_args& a, thread_pool* pool = nullptr);

}  // namespace specpipe::kernels::cpu
