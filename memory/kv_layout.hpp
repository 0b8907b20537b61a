#pragma once
// Packed KV layouts of the quantized caches and their byte accounting.
//
// Formats (DESIGN.md; KIVI, Liu et al. 2024; SpeCache 2025; QuantSpec 2025):
//  * kivi b-bit, b in {1, 2, 4}: keys per channel over groups of G tokens,
//    values per token over groups of Gv = min(G, head_dim) channels.
//    Asymmetric: zero = min, scale = (max - min) / (2^b - 1), x^ = zero + code * scale.
//  * specache: KIVI's 1-bit layout with SpeCache's levels at the quartiles:
//    zero = (3 min + max) / 4, scale = (max - min) / 2.
//  * hier (QuantSpec sec. 4.1): 4-bit upper code U (zero = min, s = (max - min)/15)
//    and 4-bit lower code L of the residual at scale s/16, signed [-8, 7] stored +8.
//    INT4 read: min + U s. INT8 read: min + U s + (L - 8) s / 16.
//  Scale and zero are stored as f16 beside the codes; codes are computed against
//  the stored (f16-rounded) scale and zero, so reconstruction is exact given them.
//
// Packing (all formats; b bits per code, b divides 8, so no code straddles bytes):
//  * Bit streams are little-endian within a byte: code i of a stream occupies
//    bits [(i*b) % 8, (i*b) % 8 + b) of byte (i*b) / 8.
//  * Keys: one block per (key group, KV head), blocks ordered group-major then
//    head ([group][kv_head]). Inside a block, channel-major: channel c's G codes
//    (token 0 of the group first) are the stream at byte c * (G*b/8). A G-token
//    group of one channel is therefore contiguous, and G*b must be a multiple of
//    8 (G % 8 == 0). Key scales/zeros: [group][kv_head][head_dim] f16.
//  * Values: one row per (token, KV head), rows ordered [token][kv_head]; a row
//    is the stream of head_dim codes, channel 0 first, ceil(head_dim*b/8) bytes.
//    Value scales/zeros: [token][kv_head][ceil(head_dim / Gv)] f16.
//  * hier keeps U and L in two separate planes, each laid out as 4-bit KIVI, so
//    an INT4 read touches only the upper plane (and it alone can stay resident).
//  * Full-precision window: [token][kv_head][head_dim], positions after the
//    quantized ones.
#include <cstddef>
#include <cstdint>
#include <string>

namespace specpipe {

enum class kv_format : std::uint8_t { full, kivi, specache, hier };

const char* kv_format_name(kv_format f);

// Code of index i in a packed b-bit stream (see the packing rules above).
inline unsigned packed_code(const std::uint8_t* stream, std::int64_t i, int bits) {
  const std::int64_t bit = i * bits;
  return (unsigned(stream[bit >> 3]) >> (bit & 7)) & ((1u << bits) - 1u);
}

// Shape of one quantized layout. `bits` is the bits per code plane (hier: 4,
// with two planes).
struct kv_layout {
  kv_format format = kv_format::kivi;
  int bits = 2;
  std::int64_t head_dim = 0;
  std::int64_t group = 64;        // G: tokens per key group, flush unit
  std::int64_t value_group = 64;  // Gv: channels per value group
  std::int64_t n_kv_heads = 0;
  std::int64_t n_layers = 0;

  // Builds and validates (std::invalid_argument naming the field): bits in
  // {1,2,4} for kivi, 1 for specache, 4 for hier; G a positive multiple of 8;
  // value_group = min(G, head_dim).
  static kv_layout make(kv_format format, int bits, std::int64_t head_dim, std::int64_t group,
                        std::int64_t n_kv_heads, std::int64_t n_layers);

  int planes() const { return format == kv_format::hier ? 2 : 1; }
  std::int64_t value_groups() const { return (head_dim + value_group - 1) / value_group; }
  // Bytes of one channel's G codes, of one (group, head) key block, of one value row.
  std::int64_t key_channel_bytes() const { return group * bits / 8; }
  std::int64_t key_block_bytes() const { return head_dim * key_channel_bytes(); }
  std::int64_t value_row_bytes() const { return (head_dim * bits + 7) / 8; }

  // Per KV head and layer: bytes of one quantized key group (all planes plus
  // f16 scale and zero per channel) and of one quantized value token (all
  // planes plus f16 scale and zero per value group).
  std::int64_t key_group_bytes() const;
  std::int64_t value_token_bytes() const;

  // Whole cache (all layers and KV heads) with `quantized` tokens (a multiple
  // of G) in packed form and `window` tokens in full precision stored with
  // `window_elem_bytes` per element (4 for the CPU backend's f32, 2 for f16).
  std::size_t bytes(std::int64_t quantized, std::int64_t window, std::int64_t window_elem_bytes) const;
};

// How many of `tokens` are quantized once tokens arrive one at a time into a
// cache whose window is flushed G at a time, before each append, while it
// holds at least `flush_at` tokens (KIVI: R + G; QuantSpec: 2G).
std::int64_t quantized_tokens(std::int64_t tokens, std::int64_t group, std::int64_t flush_at);

// Bytes of a 16-bit cache of `tokens` tokens (K and V) for the same shape.
std::size_t fp16_bytes(std::int64_t tokens, std::int64_t head_dim, std::int64_t n_kv_heads, std::int64_t n_layers);

}  // namespace specpipe
