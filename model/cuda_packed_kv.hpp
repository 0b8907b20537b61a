#pragma once
// The shape of a quantized KV cache on the GPU (cuda_forward with a kivi,
// specache or hier kv_mode): what is allocated, where, and the window rule.
// Pure bookkeeping, no CUDA: the device buffers live in cuda_forward.
//
// Per layer:
//  * packed codes, memory/kv_layout.hpp's bytes, sized for max_context tokens
//    per slot and arranged as one contiguous run per (slot, KV head)
//    (kernels/cuda/packed_attention.hpp, packed_cache_view): key blocks,
//    key scales and zeros, value rows, value scales and zeros, and hier's
//    lower planes;
//  * a bf16 window ring of win_cap = flush_at + max_append rows per (slot,
//    KV head): position p at row p % win_cap.
// Shared by all slots: a bf16 staging area (every layer, one slot of
// staging_tokens positions) where a long prefill attends the whole prompt in
// full precision, as the CPU cache does, before its groups are quantized.
//
// Window rule (model/quantized_cache.hpp): before rows are appended, the
// oldest G window tokens are quantized while the window holds at least
// flush_at tokens. A forward of at most max_append (<= G) tokens therefore
// flushes at most one group and always fits the ring; a longer prefill goes
// through the staging area and flushes what is due at its end (the state
// the CPU reaches at the next append).
#include <cstddef>
#include <cstdint>

#include "memory/kv_layout.hpp"
#include "model/config.hpp"
#include "model/kv_mode.hpp"

namespace specpipe {

// Groups the rule quantizes before an append when the window holds `window` tokens.
std::int64_t groups_due(std::int64_t window, std::int64_t flush_at, std::int64_t group);

struct packed_kv_shape {
  kv_layout layout;  // plane bits, G, head_dim, KV heads, layers
  std::int64_t slots = 0, max_context = 0;
  std::int64_t max_groups = 0;  // per slot: ceil(max_context / G)
  std::int64_t flush_at = 0, max_append = 0, win_cap = 0;
  std::int64_t staging_tokens = 0;

  // Throws std::invalid_argument naming the option: full mode, G not in {32,
  // 64, 128} (the packed attention's), head_dim not 64 or 128.
  static packed_kv_shape make(const kv_mode& mode, const model_config& c, std::int64_t slots,
                              std::int64_t max_context, std::int64_t max_append, std::int64_t staging_tokens);

  // Per (slot, KV head) runs of one layer: bytes of a code plane's keys and
  // values, f16 elements of key and value scales (zeros alike).
  std::int64_t k_run() const { return max_groups * layout.key_block_bytes(); }
  std::int64_t v_run() const { return max_groups * layout.group * layout.value_row_bytes(); }
  std::int64_t ks_run() const { return max_groups * layout.head_dim; }
  std::int64_t vs_run() const { return max_groups * layout.group * layout.value_groups(); }
  std::int64_t runs() const { return slots * layout.n_kv_heads; }

  // Bytes of one layer's packed arrays (all planes, scales and zeros), of
  // one layer's window rings (K and V), and of the staging area (all layers).
  std::size_t layer_packed_bytes() const;
  std::size_t layer_window_bytes() const;
  std::size_t staging_bytes() const;
  std::size_t total_bytes() const;
  // Packed bytes per token over all layers (codes, scales, zeros; no window).
  double packed_bytes_per_token() const;
};

}  // namespace specpipe
