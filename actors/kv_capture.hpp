#pragma once
// The rows a step adds to a sequence's cache, on their way to the host store.
// capturing_cache wraps the cache a forward runs over and keeps a copy of the
// K/V rows appended since begin_step() that are still in it: a rollback
// (truncate) drops captured rows past the new length, so after a QuantSpec
// round the capture holds exactly the accepted positions' target rows.
// pack_kv_rows turns a capture into the store's f16 row layout.
#include <cstdint>
#include <memory>
#include <vector>

#include "actors/messages.hpp"
#include "model/cache_policy.hpp"

namespace specpipe {

class capturing_cache final : public cache_policy {
 public:
  capturing_cache(std::unique_ptr<cache_policy> inner, int layers, std::int64_t kv_dim);

  // Starts a new capture at the cache's current length.
  void begin_step();
  // Tokens captured in layer 0 (every layer holds as many after a forward).
  std::int64_t captured() const;
  std::int64_t capture_start() const { return start_.empty() ? 0 : start_[0]; }
  // [captured, kv_dim] f32 rows of a layer.
  const std::vector<float>& k(int layer) const { return k_[std::size_t(layer)]; }
  const std::vector<float>& v(int layer) const { return v_[std::size_t(layer)]; }
  cache_policy& inner() { return *inner_; }

  std::int64_t length(int layer) const override { return inner_->length(layer); }
  void append(int layer, const float* k, const float* v, std::int64_t n) override;
  void attend(int layer, const float* q, std::int64_t n, std::int64_t pos0, float* out) override {
    inner_->attend(layer, q, n, pos0, out);
  }
  void truncate(std::int64_t n) override;
  std::size_t bytes_used() const override { return inner_->bytes_used(); }

 private:
  std::unique_ptr<cache_policy> inner_;
  std::int64_t kv_dim_;
  std::vector<std::int64_t> start_;  // per layer: the capture's first position
  std::vector<std::vector<float>> k_, v_;
};

// The capture as the host store's rows: [token][layer][kv head][K | V], f16,
// positions capture_start() .. + captured() - 1.
std::shared_ptr<const kv_rows> pack_kv_rows(seq_id seq, const capturing_cache& cache, int layers, int kv_heads,
                                            std::int64_t head_dim);

}  // namespace specpipe
