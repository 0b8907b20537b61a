#pragma once
// Decode attention straight over the packed low-bit KV cache on the GPU: the
// CUDA twin of kernels/quantized_attention.hpp (cpu::quantized_attention).
//
// Layout: exactly the CPU's (memory/kv_layout.hpp), so both backends read the
// same bytes: key blocks [group][kv_head] (channel-major, G codes per channel),
// value rows [token][kv_head], f16 scale/zero beside them, then a window of
// the newest tokens in full precision, here bf16 [token][kv_head][head_dim].
// hier: pass the lower planes for the INT8 read, leave them null for INT4.
//
// One query token per sequence (decode), attending every stored position
// (packed 0 .. n_quant-1, then the window). All sequences of the batch have
// the same n_quant and win_len; sequence b's arrays start at the base pointer
// plus b times the matching seq_* distance.
//
// Flash-decoding as in attention_decode.cu: grid (split, KV head, sequence),
// each block streams its run of tiles (128 packed tokens, or 32 window rows)
// through shared memory with cp.async two stages deep, serves the whole GQA
// group from one load, and dequantizes inside the score and value loops
// (k^ = z_c + s_c U [+ s_c (L-8)/16]; o += (p s_t) code + p z_t): no
// dequantized copy is ever written. A combine kernel merges the splits.
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_error.hpp"

namespace specpipe::kernels::cuda {

struct quant_decode_args {
  const std::uint16_t* q = nullptr;  // bf16 [batch, n_heads, head_dim], RoPE applied
  std::int64_t ld_q = 0;             // elements between sequences' q rows; 0: n_heads * head_dim
  int bits = 2;                      // bits of the upper (or only) plane: 1, 2 or 4
  int group = 64;                    // G, tokens per key group: 8, 16, 32, 64 or 128
  int value_group = 64;              // Gv, channels per value group (kv_layout: min(G, head_dim))
  std::int64_t n_quant = 0;          // packed tokens per sequence, a multiple of G
  std::int64_t win_len = 0;          // window tokens per sequence
  const std::uint8_t* k_codes = nullptr;
  const std::uint8_t* k_lower = nullptr;   // hier residual plane; null: upper-only read
  const std::uint16_t* k_scale = nullptr;  // f16 [group][kv_head][head_dim]
  const std::uint16_t* k_zero = nullptr;
  const std::uint8_t* v_codes = nullptr;
  const std::uint8_t* v_lower = nullptr;
  const std::uint16_t* v_scale = nullptr;  // f16 [token][kv_head][head_dim / Gv]
  const std::uint16_t* v_zero = nullptr;
  const std::uint16_t* win_k = nullptr;    // bf16 [win_len, n_kv_heads, head_dim]
  const std::uint16_t* win_v = nullptr;
  // Distances between consecutive sequences (0: packed back to back for this
  // shape): bytes for the key / value code planes, f16 elements for the key /
  // value scales and zeros, bf16 elements for the window.
  std::int64_t seq_k_codes = 0, seq_v_codes = 0, seq_k_scales = 0, seq_v_scales = 0, seq_window = 0;
  float* out_f32 = nullptr;          // [batch, n_heads, head_dim]; set this or out_bf16
  std::uint16_t* out_bf16 = nullptr;
  std::int64_t ld_out = 0;           // 0: n_heads * head_dim
  float* partial = nullptr;          // scratch, quant_decode_attention_scratch_floats()
  int batch = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int splits = 1;                    // per sequence, <= the max_splits the scratch was sized for
  float scale = 0;                   // usually 1/sqrt(head_dim)
};

std::size_t quant_decode_attention_scratch_floats(int batch, int n_heads, int head_dim, int max_splits);

// Work tiles of one (sequence, KV head): ceil(n_quant / 128) packed tiles plus
// ceil(win_len / 32) window tiles; splits cut this run into equal parts.
std::int64_t quant_decode_attention_tiles(std::int64_t n_quant, std::int64_t win_len);

// Splits that fill the machine, as decode_attention_splits: the grid's blocks
// busy >= 90% of the block slots of its waves where possible, fewest splits
// among equals, each split at least two tiles, at most max_splits.
int quant_decode_attention_splits(int batch, int n_kv_heads, std::int64_t n_quant, std::int64_t win_len,
                                  int sm_count, int max_splits, int blocks_per_sm);

// Resident blocks per multiprocessor for this configuration (occupancy query).
int quant_decode_attention_blocks_per_sm(const quant_decode_args& a);

// Validates (std::invalid_argument naming the field) and launches the split
// kernel and the combine on stream s. Supports head_dim 64 and 128, GQA
// groups 1, 4 and 8; every pointer 16-byte aligned, seq_* distances keeping
// each sequence 16-byte aligned.
void quant_decode_attention(const quant_decode_args& a, stream_t s);

}  // namespace specpipe::kernels::cuda
