#include "model/specache_topk.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/topk.hpp"

namespace specpipe {

void specache_topk::choose(const specache_probs& p, int k) {
  if (k < 1) throw std::invalid_argument("specache top-k: k must be >= 1, got " + std::to_string(k));
  k_ = k;
  positions_.resize(std::size_t(p.n_kv_heads * k));
  count_.resize(std::size_t(p.n_kv_heads));
  scratch_scores_.resize(std::size_t(std::max<std::int64_t>(p.candidates, 1)));
  scratch_index_.resize(scratch_scores_.size());
  kernels::cpu::topk_args a;
  a.probs = p.probs;
  a.probs_stride = p.stride;
  a.len = p.candidates;
  a.n_heads = p.n_heads;
  a.n_kv_heads = p.n_kv_heads;
  a.k = k;
  a.exclude = -1;  // candidates never include the query's own position
  a.positions = positions_.data();
  a.count = count_.data();
  a.scratch_scores = scratch_scores_.data();
  a.scratch_index = scratch_index_.data();
  kernels::cpu::topk_gqa(a);
  for (std::int64_t h = 0; h < p.n_kv_heads; ++h)
    std::sort(positions_.begin() + h * k, positions_.begin() + h * k + count_[std::size_t(h)]);
}

std::int64_t specache_topk::total() const {
  std::int64_t n = 0;
  for (const auto c : count_) n += c;
  return n;
}

std::int64_t specache_topk::hits_in(const specache_rows& rows) const {
  std::int64_t hits = 0;
  for (std::int64_t h = 0; h < heads() && h < std::int64_t(rows.count.size()); ++h) {
    const std::int64_t* have = rows.positions.data() + h * rows.stride;
    const std::int64_t n = rows.count[std::size_t(h)];
    for (std::int64_t i = 0; i < count(h); ++i)
      if (std::binary_search(have, have + n, positions(h)[i])) ++hits;
  }
  return hits;
}

}  // namespace specpipe
