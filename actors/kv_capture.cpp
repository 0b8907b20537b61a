#include "actors/kv_capture.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "actors/kv_rows_pack.hpp"

#include "memory/dtype.hpp"

namespace specpipe {

capturing_cache::capturing_cache(std::unique_ptr<cache_policy> inner, int layers, std::int64_t kv_dim)
    : inner_(std::move(inner)), kv_dim_(kv_dim), start_(std::size_t(layers), 0), k_(std::size_t(layers)),
      v_(std::size_t(layers)) {
  if (!inner_) throw std::invalid_argument("capturing_cache: no cache to wrap");
}

void capturing_cache::begin_step() {
  for (std::size_t l = 0; l < k_.size(); ++l) {
    start_[l] = inner_->length(int(l));
    k_[l].clear();
    v_[l].clear();
  }
}

std::int64_t capturing_cache::captured() const { return k_.empty() ? 0 : std::int64_t(k_[0].size()) / kv_dim_; }

void capturing_cache::append(int layer, const float* k, const float* v, std::int64_t n) {
  const auto l = std::size_t(layer);
  if (l >= k_.size())
    throw std::out_of_range("capturing_cache::append: layer " + std::to_string(layer) + " outside [0, " +
                            std::to_string(k_.size()) + ")");
  // Rows land at the end of the cache; the capture is contiguous from start_.
  if (inner_->length(layer) != start_[l] + std::int64_t(k_[l].size()) / kv_dim_)
    throw std::logic_error("capturing_cache::append: layer " + std::to_string(layer) +
                           " was changed outside the capture (begin_step() missing?)");
  inner_->append(layer, k, v, n);
  const std::size_t count = std::size_t(n * kv_dim_);
  k_[l].insert(k_[l].end(), k, k + count);
  v_[l].insert(v_[l].end(), v, v + count);
}

void capturing_cache::truncate(std::int64_t n) {
  inner_->truncate(n);
  for (std::size_t l = 0; l < k_.size(); ++l) {
    const std::int64_t keep = std::clamp<std::int64_t>(n - start_[l], 0, std::int64_t(k_[l].size()) / kv_dim_);
    if (n < start_[l]) start_[l] = n;  // rolled back past the capture's start: it restarts there
    k_[l].resize(std::size_t(keep * kv_dim_));
    v_[l].resize(std::size_t(keep * kv_dim_));
  }
}

std::shared_ptr<const kv_rows> pack_kv_rows(seq_id seq, const capturing_cache& cache, int layers, int heads,
                                            std::int64_t hd) {
  std::vector<const float*> k, v;
  for (int l = 0; l < layers; ++l) {
    k.push_back(cache.k(l).data());
    v.push_back(cache.v(l).data());
  }
  return pack_kv_rows(seq, cache.capture_start(), cache.captured(), heads, hd, k, v);
}

}  // namespace specpipe
