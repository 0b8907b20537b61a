#include "actors/topk_planner.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace specpipe {

std::vector<std::int64_t> topk_positions(std::span<const float> scores, int group,
                                         std::int64_t n_positions, std::int64_t exclude, int k) {
  if (group <= 0 || std::int64_t(scores.size()) != std::int64_t(group) * n_positions)
    throw std::invalid_argument("topk_positions: " + std::to_string(scores.size()) +
                                " scores for group " + std::to_string(group) + " x " +
                                std::to_string(n_positions) + " positions");
  // GQA: the query heads of a group share one KV head, so the row is fetched
  // for all of them; their mean probability ranks it (SpeCache, Sec. 3.2).
  std::vector<float> mean(std::size_t(n_positions), 0.0f);
  for (int g = 0; g < group; ++g)
    for (std::int64_t p = 0; p < n_positions; ++p) mean[std::size_t(p)] += scores[std::size_t(g * n_positions + p)];
  std::vector<std::int64_t> idx;
  idx.reserve(std::size_t(n_positions));
  for (std::int64_t p = 0; p < n_positions; ++p)
    if (p != exclude) idx.push_back(p);
  const std::size_t take = std::min(idx.size(), std::size_t(std::max(k, 0)));
  auto better = [&](std::int64_t a, std::int64_t b) {
    const float x = mean[std::size_t(a)], y = mean[std::size_t(b)];
    return x != y ? x > y : a < b;
  };
  std::partial_sort(idx.begin(), idx.begin() + std::ptrdiff_t(take), idx.end(), better);
  idx.resize(take);
  std::sort(idx.begin(), idx.end());
  return idx;
}

topk_planner::topk_planner(int k) : k_(k) {
  if (k <= 0) throw std::invalid_argument("topk_planner: k must be > 0, got " + std::to_string(k));
}

std::vector<topk_selection> topk_planner::plan(const spec_scores& s) {
  const std::int64_t per_head = std::int64_t(s.group) * s.n_positions;
  const std::int64_t expect = std::int64_t(s.n_layers) * s.n_kv_heads * per_head;
  if (s.n_layers <= 0 || s.n_kv_heads <= 0 || std::int64_t(s.probs.size()) != expect)
    throw std::invalid_argument("topk_planner: sequence " + std::to_string(s.seq) + ": " +
                                std::to_string(s.probs.size()) + " scores, expected " +
                                std::to_string(s.n_layers) + " layers x " + std::to_string(s.n_kv_heads) +
                                " heads x " + std::to_string(s.group) + " x " +
                                std::to_string(s.n_positions) + " = " + std::to_string(expect));
  std::vector<topk_selection> out;
  auto& fetched = fetched_[s.seq];
  fetched.assign(std::size_t(s.n_layers) * std::size_t(s.n_kv_heads), {});
  heads_[s.seq] = s.n_kv_heads;
  for (int l = 0; l < s.n_layers; ++l)
    for (int h = 0; h < s.n_kv_heads; ++h) {
      const std::size_t stream = std::size_t(l) * std::size_t(s.n_kv_heads) + std::size_t(h);
      std::span<const float> head(s.probs.data() + stream * std::size_t(per_head), std::size_t(per_head));
      auto pos = topk_positions(head, s.group, s.n_positions, s.query_position, k_);
      fetched[stream] = pos;
      out.push_back({l, h, std::move(pos)});
    }
  return out;
}

topk_hit_stats topk_planner::record_needed(seq_id seq, std::span<const topk_selection> needed) {
  topk_hit_stats step;
  const auto it = fetched_.find(seq);
  const int heads = it == fetched_.end() ? 0 : heads_[seq];
  for (const auto& sel : needed) {
    step.needed += std::int64_t(sel.positions.size());
    if (it == fetched_.end()) continue;
    const std::size_t stream = std::size_t(sel.layer) * std::size_t(heads) + std::size_t(sel.kv_head);
    if (stream >= it->second.size()) continue;
    const auto& have = it->second[stream];
    for (const std::int64_t p : sel.positions)
      if (std::binary_search(have.begin(), have.end(), p)) ++step.hits;
  }
  totals_.needed += step.needed;
  totals_.hits += step.hits;
  return step;
}

}  // namespace specpipe
