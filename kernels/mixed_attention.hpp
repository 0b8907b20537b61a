#pragma once
// SpeCache's mixed attention (DESIGN.md): attention over the low-bit cache of
// kernels/quantized_attention.hpp in which, per KV head, a given set of
// positions is read from separate 16-bit (or f32) rows instead: the top-k rows
// fetched from the host store. A replaced position may lie in the packed part
// or in the window; its row wins either way.
#include <cstdint>

#include "kernels/quantized_attention.hpp"
#include "memory/dtype.hpp"

namespace specpipe::kernels::cpu {

struct mixed_rows {
  // positions[h * stride + r], r < count[h]: strictly increasing positions of KV head h.
  const std::int64_t* positions = nullptr;
  const std::int64_t* count = nullptr;  // [n_kv_heads]
  std::int64_t stride = 0;              // max rows per head
  // k/v rows: row r of head h at (h * stride + r) * head_dim elements of `dtype`.
  const void* k = nullptr;
  const void* v = nullptr;
  dtype type = dtype::f16;  // f16, bf16 or f32
};

// Same contract as quantized_attention (probs included), with rows replaced.
// Throws std::invalid_argument when a head's positions are not strictly
// increasing or the row dtype is unsupported.
void mixed_attention(const quantized_attention_args& a, const mixed_rows& rows, thread_pool* pool = nullptr);

}  // namespace specpipe::kernels::cpu
