#pragma once
// Quantize-and-pack of bf16 KV rows into the packed layout on the GPU: the
// CUDA twin of kernels/quantize.hpp (cpu::quantize_key_group and
// cpu::quantize_value_rows), plus the row moves the device cache needs
// around a prefill (window ring <-> contiguous rows, packed -> bf16 rows).
//
// Bit-exact with the CPU on the same (bf16-valued) inputs: the same
// min/max, scale and zero formulas in f32 without contraction (__fmul_rn,
// __fadd_rn, __fdiv_rn), the same f16 round-to-nearest-even of scale and
// zero, codes from the rounded values with rintf (ties to even), the same
// residual plane for hier. Every output byte of a group is written.
//
// Addressing is by strides, so one kernel serves the device cache (per
// (slot, head) runs) and the CPU's layout (tests): element (slot s, KV head
// h, ...) of an array at base + s * slot_stride + h * head_stride + ...
#include <cstdint>

#include "kernels/cuda/cuda_error.hpp"
#include "kernels/cuda/packed_lane_order.hpp"

namespace specpipe::kernels::cuda {

// How the levels of a group are placed (kernels/quantize.hpp's quant_rule).
enum class quant_rule_gpu : std::uint8_t { rtn, specache, hier };

// Source rows, bf16: (slot s, KV head h, position p, channel c) at
// base + s * slot_stride + h * head_stride + (p % ring) * row_stride + c (elements).
struct row_source {
  const std::uint16_t* k = nullptr;
  const std::uint16_t* v = nullptr;
  std::int64_t slot_stride = 0, head_stride = 0, row_stride = 0;
  std::int64_t ring = 0x7fffffffffffffff;  // rows before positions wrap
};

// Packed destination. Key block of group q at codes + s*k_slot + h*k_head + q*k_group (bytes);
// key scale/zero of group q at + s*ks_slot + h*ks_head + q*ks_group (f16 elements, head_dim of them);
// value row of token p at v_codes + s*v_slot + h*v_head + p*v_token (bytes);
// value scale/zero of token p at + s*vs_slot + h*vs_head + p*vs_token (value groups of them).
// In lane order (packed_lane_order.hpp; head_dim 128) a key "block" is G rows
// in that order and value codes are 16-token blocks: the strides are the same
// numbers (k_group = G * 16 b bytes, v_token = 16 b bytes per token).
struct packed_dest {
  packed_order order = packed_order::cpu;
  std::uint8_t* k_codes = nullptr;
  std::uint8_t* k_lower = nullptr;  // hier only
  std::uint16_t* k_scale = nullptr;
  std::uint16_t* k_zero = nullptr;
  std::uint8_t* v_codes = nullptr;
  std::uint8_t* v_lower = nullptr;  // hier only
  std::uint16_t* v_scale = nullptr;
  std::uint16_t* v_zero = nullptr;
  std::int64_t k_slot = 0, k_head = 0, k_group = 0;
  std::int64_t ks_slot = 0, ks_head = 0, ks_group = 0;
  std::int64_t v_slot = 0, v_head = 0, v_token = 0;
  std::int64_t vs_slot = 0, vs_head = 0, vs_token = 0;
};

struct quantize_args {
  row_source src;
  packed_dest dst;
  quant_rule_gpu rule = quant_rule_gpu::rtn;
  int bits = 2;        // of the upper (or only) plane: rtn 1/2/4, specache 1, hier 4
  int group = 64;      // G: a power of two in [8, 128]
  int head_dim = 128;  // a multiple of min(G, head_dim), at most 256
  int n_kv_heads = 0;
  // Per entry (device): the slot, the first group to write (group q covers
  // positions q G .. q G + G - 1) and how many groups (0: none). Launches
  // max_groups blocks per (entry, head); extra ones return at once, so a
  // decode step can always launch it and let the device skip.
  const std::int32_t* entry_slot = nullptr;
  const std::int32_t* entry_first_group = nullptr;
  const std::int32_t* entry_groups = nullptr;
  int entries = 0;
  int max_groups = 1;
  // Layers in one launch (a decode step quantizes every layer's due groups
  // at once, one launch instead of one per layer): layer i reads src.k and
  // src.v moved by i * src_layer elements and writes every packed array
  // moved by i * dst_layer bytes. The per-entry arrays are the same for
  // all layers. entries * layers <= 65535.
  int layers = 1;
  std::int64_t src_layer = 0;
  std::int64_t dst_layer = 0;
  bool dependent = false;  // a programmatic dependent launch (kernels/cuda/launch.cuh)
};

// Validates (std::invalid_argument naming the field) and launches.
void quantize_groups(const quantize_args& a, stream_t s);

// Copies rows of positions [first[e], first[e] + count[e]) of each entry
// and KV head from `from` to `to` (bf16, both addressed like row_source;
// `to` may be a ring too), for every KV head. max_rows bounds count (grid).
struct row_copy_args {
  row_source from;
  std::uint16_t* to_k = nullptr;
  std::uint16_t* to_v = nullptr;
  std::int64_t to_slot_stride = 0, to_head_stride = 0, to_row_stride = 0;
  std::int64_t to_ring = 0x7fffffffffffffff;
  const std::int32_t* entry_slot = nullptr;  // device
  const std::int32_t* entry_first = nullptr;
  const std::int32_t* entry_count = nullptr;
  int entries = 0, n_kv_heads = 0, head_dim = 0;
  int max_rows = 0;
};
void copy_rows(const row_copy_args& a, stream_t s);

// Dequantizes packed groups [0, groups) of one slot into bf16 rows
// (positions 0 .. groups * G - 1): keys z + s U (+ s (L - 8) / 16 with the
// lower plane), values likewise; `lower` selects the INT8 read of hier.
struct dequantize_args {
  packed_dest src;  // read only here
  bool lower = false;
  int bits = 2, group = 64, head_dim = 128, n_kv_heads = 0;
  int slot = 0;
  int groups = 0;
  std::uint16_t* to_k = nullptr;  // row (h, p) at h * to_head_stride + p * to_row_stride
  std::uint16_t* to_v = nullptr;
  std::int64_t to_head_stride = 0, to_row_stride = 0;
};
void dequantize_rows(const dequantize_args& a, stream_t s);

}  // namespace specpipe::kernels::cuda
