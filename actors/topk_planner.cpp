#include "actors/topk_planner.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/topk.hpp"

namespace specpipe {

std::vector<std::int64_t> topk_positions(std::span<const float> scores, int group,
                                         std::int64_t n_positions, std::int64_t exclude, int k) {
  if (group <= 0 || std::int64_t(scores.size()) != std::int64_t(group) * n_positions)
    throw std::invalid_argument("topk_positions: " + std::to_string(scores.size()) +
                                " scores for group " + std::to_string(group) + " x " +
                                std::to_string(n_positions) + " positions");
  // GQA: the query heads of a group share one KV head, so the row is fetched
  // for all of them; their mean probability ranks it (SpeCache, Sec. 3.2).
  // The kernel every backend's top-k is checked against decides, so the
  // planner and the synchronous session choose the same rows.
  const int take = std::max(0, k);
  std::vector<std::int64_t> pos(static_cast<std::size_t>(take)), count(1);
  std::vector<float> scratch(std::size_t(std::max<std::int64_t>(n_positions, 1)));
  std::vector<std::int64_t> index(scratch.size());
  kernels::cpu::topk_args a;
  a.probs = scores.data();
  a.probs_stride = n_positions;
  a.len = n_positions;
  a.n_heads = group;
  a.n_kv_heads = 1;
  a.k = take;
  a.exclude = exclude;
  a.positions = pos.data();
  a.count = count.data();
  a.scratch_scores = scratch.data();
  a.scratch_index = index.data();
  kernels::cpu::topk_gqa(a);
  pos.resize(std::size_t(count[0]));
  std::sort(pos.begin(), pos.end());
  return pos;
}

topk_planner::topk_planner(int k) : k_(k) {
  if (k <= 0) throw std::invalid_argument("topk_planner: k must be > 0, got " + std::to_string(k));
}

std::vector<topk_selection> topk_planner::plan(const spec_scores& s) const {
  const std::int64_t per_head = std::int64_t(s.group) * s.n_positions;
  const std::int64_t expect = std::int64_t(s.n_layers) * s.n_kv_heads * per_head;
  if (s.n_layers <= 0 || s.n_kv_heads <= 0 || std::int64_t(s.probs.size()) != expect)
    throw std::invalid_argument("topk_planner: sequence " + std::to_string(s.seq) + ": " +
                                std::to_string(s.probs.size()) + " scores, expected " +
                                std::to_string(s.n_layers) + " layers x " + std::to_string(s.n_kv_heads) +
                                " heads x " + std::to_string(s.group) + " x " +
                                std::to_string(s.n_positions) + " = " + std::to_string(expect));
  std::vector<topk_selection> out;
  for (int l = 0; l < s.n_layers; ++l)
    for (int h = 0; h < s.n_kv_heads; ++h) {
      const std::size_t stream = std::size_t(l) * std::size_t(s.n_kv_heads) + std::size_t(h);
      std::span<const float> head(s.probs.data() + stream * std::size_t(per_head), std::size_t(per_head));
      out.push_back({s.layer0 + l, h, topk_positions(head, s.group, s.n_positions, s.query_position, k_)});
    }
  return out;
}

}  // namespace specpipe
