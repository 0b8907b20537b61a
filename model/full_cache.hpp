#pragma once
// The reference KV cache: every layer's K and V rows kept in f32 host memory,
// attention computed exactly over them. Other policies (quantized, offloaded)
// are tested against this one.
#include <cstdint>
#include <vector>

#include "model/cache_policy.hpp"
#include "model/config.hpp"

namespace specpipe {

namespace kernels::cpu { class thread_pool; }

class full_cache final : public cache_policy {
 public:
  // Holds up to max_tokens positions per layer. Memory grows with use
  // (geometrically, up to max_tokens) rather than being reserved up front.
  full_cache(const model_config& config, std::int64_t max_tokens,
             kernels::cpu::thread_pool* pool = nullptr);

  std::int64_t length(int layer) const override;
  // Throws std::length_error when the layer would exceed max_tokens.
  void append(int layer, const float* k, const float* v, std::int64_t n) override;
  // Throws std::invalid_argument unless positions pos0 .. pos0+n-1 are stored.
  void attend(int layer, const float* q, std::int64_t n, std::int64_t pos0, float* out) override;
  void truncate(std::int64_t n) override;
  // Bytes of K/V rows stored now (length x kv_dim x 4 x 2, summed over layers).
  std::size_t bytes_used() const override;

  std::int64_t max_tokens() const { return max_tokens_; }
  // Rows of one layer, [length, n_kv_heads, head_dim] f32, for tests and for
  // policies that compare against the exact cache.
  const float* keys(int layer) const;
  const float* values(int layer) const;

 private:
  struct layer_rows {
    std::vector<float> k;
    std::vector<float> v;
    std::int64_t length = 0;
  };
  layer_rows& at(int layer, const char* op);
  const layer_rows& at(int layer, const char* op) const;

  std::int64_t n_heads_;
  std::int64_t n_kv_heads_;
  std::int64_t head_dim_;
  std::int64_t kv_dim_;
  std::int64_t max_tokens_;
  kernels::cpu::thread_pool* pool_;
  std::vector<layer_rows> layers_;
};

}  // namespace specpipe
