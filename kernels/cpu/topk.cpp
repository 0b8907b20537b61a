#include "kernels/topk.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace specpipe::kernels::cpu {

void topk_gqa(const topk_args& a) {
  if (a.n_heads <= 0 || a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    throw std::invalid_argument("topk_gqa: n_heads " + std::to_string(a.n_heads) +
                                " is not a positive multiple of n_kv_heads " + std::to_string(a.n_kv_heads));
  if (a.len < 0 || a.k < 0 || a.probs_stride < a.len)
    throw std::invalid_argument("topk_gqa: len " + std::to_string(a.len) + ", k " + std::to_string(a.k) +
                                " and probs_stride " + std::to_string(a.probs_stride) + " are inconsistent");
  if (!a.positions || !a.count || (a.len > 0 && (!a.probs || !a.scratch_scores || !a.scratch_index)))
    throw std::invalid_argument("topk_gqa: probs, outputs and scratch must be given");
  const std::int64_t group = a.n_heads / a.n_kv_heads;
  for (std::int64_t g = 0; g < a.n_kv_heads; ++g) {
    float* avg = a.scratch_scores;
    std::int64_t* idx = a.scratch_index;
    std::int64_t m = 0;
    for (std::int64_t j = 0; j < a.len; ++j) {
      float s = 0;
      for (std::int64_t h = g * group; h < (g + 1) * group; ++h) s += a.probs[h * a.probs_stride + j];
      // Ranked by the sum: the mean's order, without a division whose
      // rounding would tie distinct denormal probabilities.
      avg[j] = s;
      if (j != a.exclude) idx[m++] = j;
    }
    const std::int64_t k = std::min(a.k, m);
    // Descending score, then ascending position: a strict weak order, so the
    // selection is unique.
    auto before = [avg](std::int64_t x, std::int64_t y) { return avg[x] > avg[y] || (avg[x] == avg[y] && x < y); };
    std::partial_sort(idx, idx + k, idx + m, before);
    std::copy(idx, idx + k, a.positions + g * a.k);
    a.count[g] = k;
  }
}

}  // namespace specpipe::kernels::cpu
