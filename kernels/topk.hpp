#pragma once
// SpeCache's top-k choice (DESIGN.md): per KV head, the k positions with the
// largest softmax probability averaged over the query heads of its GQA group,
// excluding one position (the speculative query's own). The group's sum ranks
// (the mean's order, without rounding a division into ties). Ties go to the
// lower position, so the choice is deterministic and backend-independent.
#include <cstdint>

namespace specpipe::kernels::cpu {

struct topk_args {
  // probs[h * probs_stride + j], h < n_heads, j < len: one query's probabilities.
  const float* probs = nullptr;
  std::int64_t probs_stride = 0;
  std::int64_t len = 0;
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;
  std::int64_t k = 0;
  std::int64_t exclude = -1;  // position left out; -1 (or out of range): none
  // Output: positions[g * k + r] for r < count[g], by descending averaged
  // probability (ties: lower position first); count[g] = min(k, eligible positions).
  std::int64_t* positions = nullptr;
  std::int64_t* count = nullptr;
  // Scratch of at least len floats plus len int64 (caller-owned: no allocation).
  float* scratch_scores = nullptr;
  std::int64_t* scratch_index = nullptr;
};

// Throws std::invalid_argument on inconsistent shapes or missing scratch.
void topk_gqa(const topk_args& a);

}  // namespace specpipe::kernels::cpu
