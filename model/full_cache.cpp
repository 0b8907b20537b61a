#include "model/full_cache.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/attention.hpp"
#include "model/forward.hpp"

namespace specpipe {

full_cache::full_cache(const model_config& config, std::int64_t max_tokens,
                       kernels::cpu::thread_pool* pool)
    : n_heads_(config.num_attention_heads),
      n_kv_heads_(config.num_key_value_heads),
      head_dim_(config.head_dim),
      kv_dim_(config.kv_dim()),
      max_tokens_(max_tokens),
      pool_(pool) {
  if (config.num_hidden_layers <= 0 || n_heads_ <= 0 || n_kv_heads_ <= 0 || head_dim_ <= 0)
    throw std::invalid_argument(
        "full_cache: config needs positive num_hidden_layers, num_attention_heads, "
        "num_key_value_heads and head_dim");
  if (max_tokens <= 0)
    throw std::invalid_argument("full_cache: max_tokens must be positive, got " +
                                std::to_string(max_tokens));
  layers_.resize(std::size_t(config.num_hidden_layers));
}

full_cache::layer_rows& full_cache::at(int layer, const char* op) {
  return const_cast<layer_rows&>(std::as_const(*this).at(layer, op));
}

const full_cache::layer_rows& full_cache::at(int layer, const char* op) const {
  if (layer < 0 || std::size_t(layer) >= layers_.size())
    throw std::out_of_range(std::string("full_cache::") + op + ": layer " + std::to_string(layer) +
                            " outside [0, " + std::to_string(layers_.size()) + ")");
  return layers_[std::size_t(layer)];
}

std::int64_t full_cache::length(int layer) const { return at(layer, "length").length; }

void full_cache::append(int layer, const float* k, const float* v, std::int64_t n) {
  layer_rows& l = at(layer, "append");
  if (n < 0) throw std::invalid_argument("full_cache::append: negative token count");
  if (l.length + n > max_tokens_)
    throw std::length_error("full_cache::append: layer " + std::to_string(layer) + " holds " +
                            std::to_string(l.length) + " tokens; " + std::to_string(n) +
                            " more exceed the capacity of " + std::to_string(max_tokens_));
  const std::size_t need = std::size_t((l.length + n) * kv_dim_);
  if (need > l.k.size()) {
    // Grow geometrically (amortized O(1) per token), never past capacity.
    const std::size_t cap = std::size_t(max_tokens_ * kv_dim_);
    const std::size_t grown = std::min(cap, std::max(need, l.k.size() * 2));
    l.k.resize(grown);
    l.v.resize(grown);
  }
  std::copy(k, k + n * kv_dim_, l.k.data() + l.length * kv_dim_);
  std::copy(v, v + n * kv_dim_, l.v.data() + l.length * kv_dim_);
  l.length += n;
}

void full_cache::attend(int layer, const float* q, std::int64_t n, std::int64_t pos0, float* out) {
  const layer_rows& l = at(layer, "attend");
  kernels::cpu::attention_args a;
  a.q = q;
  a.k = l.k.data();
  a.v = l.v.data();
  a.len = l.length;
  a.out = out;
  a.n = n;
  a.pos0 = pos0;
  a.n_heads = n_heads_;
  a.n_kv_heads = n_kv_heads_;
  a.head_dim = head_dim_;
  kernels::cpu::attention(a, pool_);
}

void full_cache::truncate(std::int64_t n) {
  if (n < 0) throw std::invalid_argument("full_cache::truncate: negative length");
  for (auto& l : layers_) l.length = std::min(l.length, n);
}

std::size_t full_cache::bytes_used() const {
  std::size_t total = 0;
  for (const auto& l : layers_) total += std::size_t(l.length * kv_dim_) * sizeof(float) * 2;
  return total;
}

const float* full_cache::keys(int layer) const { return at(layer, "keys").k.data(); }
const float* full_cache::values(int layer) const { return at(layer, "values").v.data(); }

std::unique_ptr<cache_policy> make_full_cache(const model_config& config, std::int64_t max_tokens,
                                              kernels::cpu::thread_pool* pool) {
  return std::make_unique<full_cache>(config, max_tokens, pool);
}

}  // namespace specpipe
