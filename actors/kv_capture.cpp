#include "actors/kv_capture.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

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
  auto r = std::make_shared<kv_rows>();
  const std::int64_t n = cache.captured();
  r->seq = seq;
  r->pos0 = cache.capture_start();
  r->n_tokens = n;
  r->n_layers = layers;
  r->n_kv_heads = heads;
  r->row_bytes = std::size_t(hd) * 2 * sizeof(std::uint16_t);
  r->data.resize(std::size_t(n) * std::size_t(layers) * std::size_t(heads) * r->row_bytes);
  auto* dst = reinterpret_cast<std::uint16_t*>(r->data.data());
  for (std::int64_t t = 0; t < n; ++t)
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < heads; ++h) {
        const std::size_t at = std::size_t((t * heads + h) * hd);
        const float* k = cache.k(l).data() + at;
        const float* v = cache.v(l).data() + at;
        for (std::int64_t d = 0; d < hd; ++d) *dst++ = f32_to_f16(k[d]);
        for (std::int64_t d = 0; d < hd; ++d) *dst++ = f32_to_f16(v[d]);
      }
  return r;
}

}  // namespace specpipe
