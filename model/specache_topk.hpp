#pragma once
// SpeCache's top-k choice for one layer (DESIGN.md; SpeCache sec. 3.2): per
// KV head, the k candidate positions with the largest probability averaged
// over the query heads of its GQA group (kernels::cpu::topk_gqa ranks them),
// kept in ascending order per head, as mixed attention reads them.
#include <cstdint>
#include <vector>

#include "model/specache_cache.hpp"

namespace specpipe {

class specache_topk {
 public:
  // Chooses from p's candidates; k >= 1.
  void choose(const specache_probs& p, int k);

  std::int64_t k() const { return k_; }
  std::int64_t heads() const { return std::int64_t(count_.size()); }
  // Head h's positions: positions() + h * k(), count(h) of them, ascending.
  const std::int64_t* positions(std::int64_t h) const { return positions_.data() + h * k_; }
  std::int64_t count(std::int64_t h) const { return count_[std::size_t(h)]; }
  std::int64_t total() const;

  // How many of this set's positions `rows` holds for the same head.
  std::int64_t hits_in(const specache_rows& rows) const;

 private:
  std::int64_t k_ = 0;
  std::vector<std::int64_t> positions_;  // [heads * k]
  std::vector<std::int64_t> count_;
  std::vector<float> scratch_scores_;
  std::vector<std::int64_t> scratch_index_;
};

}  // namespace specpipe
