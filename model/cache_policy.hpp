#pragma once
// The forward pass's only window onto the KV cache. A policy decides how K/V
// rows are stored (full precision, quantized, offloaded) and how attention is
// computed over them; the model code calls append() then attend() per layer
// and never looks inside.
#include <cstddef>
#include <cstdint>

namespace specpipe {

class cache_policy {
 public:
  virtual ~cache_policy() = default;

  // Tokens stored for `layer` (the next token's position when all layers agree).
  virtual std::int64_t length(int layer) const = 0;

  // Appends `n` new tokens' rows for `layer`: k and v are [n, n_kv_heads,
  // head_dim] f32, RoPE already applied to k.
  virtual void append(int layer, const float* k, const float* v, std::int64_t n) = 0;

  // Attention for `n` query tokens at positions pos0 .. pos0+n-1: q is
  // [n, n_heads, head_dim] f32 (RoPE applied); query i attends to cached
  // positions 0 .. pos0+i (causal). Writes out [n, n_heads, head_dim] f32.
  virtual void attend(int layer, const float* q, std::int64_t n, std::int64_t pos0, float* out) = 0;

  // Drops every token at position >= n in all layers (rollback).
  virtual void truncate(std::int64_t n) = 0;

  // Bytes this cache holds now (codes, scales, windows).
  virtual std::size_t bytes_used() const = 0;
};

}  // namespace specpipe
