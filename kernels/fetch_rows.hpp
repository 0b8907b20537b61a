#pragma once
// SpeCache's fetch of one layer's top-k rows: for every planner row (one per
// sequence) and KV head, the positions a top-k chose are sorted ascending
// (the order the mixed attention walks them in) and their 16-bit K and V rows
// are copied out of the host store into the layer's replaced-row buffers.
//
// Store layout (the GPU runtime's host store, model/cuda_forward_impl.hpp):
// row (slot s, KV head h, position p) at
//   ((s * n_kv_heads + h) * store_tokens + p % store_tokens) * 2 * head_dim,
// K's head_dim elements, then V's: one 512-byte run per token and head at
// head_dim 128, so one fetched row is one contiguous read. store_tokens is
// normally the context capacity; benchmarks that cannot pin a host store for
// every sequence alias positions modulo a smaller one.
//
// cpu::fetch_rows is the reference; cuda::fetch_rows (kernels/cuda/
// fetch_rows.hpp) reads the store straight out of mapped pinned host memory.
#include <cstdint>

namespace specpipe::kernels {

struct fetch_rows_args {
  // Top-k output per planner row r and KV head h: topk_positions[(r *
  // n_kv_heads + h) * k + i] for i < topk_count[r * n_kv_heads + h]
  // (distinct, any order; kernels/topk.hpp's descending-probability order).
  const std::int32_t* topk_positions = nullptr;
  const std::int32_t* topk_count = nullptr;
  int k = 0;
  // Slot of planner row r: the store's slot and the destination index.
  const std::int32_t* row_slot = nullptr;
  const std::uint16_t* store = nullptr;  // 16-bit rows, see above
  std::int64_t store_tokens = 0;
  int rows = 0, n_kv_heads = 0, head_dim = 0;
  // Output per destination slot s = row_slot[r] and head h: positions[(s *
  // n_kv_heads + h) * k + i] ascending for i < count[s * n_kv_heads + h], and
  // the rows at ((s * n_kv_heads + h) * k + i) * head_dim of k_rows / v_rows.
  // Entries past the count are left as they are.
  std::int32_t* positions = nullptr;
  std::int32_t* count = nullptr;
  std::uint16_t* k_rows = nullptr;
  std::uint16_t* v_rows = nullptr;
};

// SpeCache's hit rate: of the positions a real row's own top-k needs
// (needed[(r * n_kv_heads + h) * k + i], i < needed_count[...]), how many
// the slot's fetched set holds (fetched_positions ascending, as fetch_rows
// leaves them). Adds the needed and the hit counts to totals[0] and [1].
struct count_hits_args {
  const std::int32_t* needed = nullptr;
  const std::int32_t* needed_count = nullptr;
  int k = 0;                                   // stride of `needed`
  const std::int32_t* row_slot = nullptr;      // [rows]
  const std::int32_t* fetched_positions = nullptr;  // per (slot, head): fetched_stride ascending
  const std::int32_t* fetched_count = nullptr;
  int fetched_stride = 0;
  int rows = 0, n_kv_heads = 0;
  unsigned long long* totals = nullptr;        // [2]: needed, hits (accumulated)
};

namespace cpu {
// Throws std::invalid_argument naming a missing array, a count above k or a
// negative position.
void fetch_rows(const fetch_rows_args& a);
void count_hits(const count_hits_args& a);
}  // namespace cpu

}  // namespace specpipe::kernels
