#include "model/quantized_cache.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "kernels/cpu/thread_pool.hpp"

namespace specpipe {

quantized_cache::quantized_cache(const model_config& config, const kv_layout& layout, kernels::cpu::quant_rule rule,
                                 std::int64_t flush_at, std::int64_t max_tokens, kernels::cpu::thread_pool* pool,
                                 std::string name)
    : name_(std::move(name)),
      layout_(layout),
      rule_(rule),
      n_heads_(config.num_attention_heads),
      kv_dim_(config.kv_dim()),
      flush_at_(flush_at),
      max_tokens_(max_tokens),
      pool_(pool) {
  if (config.num_hidden_layers != layout.n_layers || config.num_key_value_heads != layout.n_kv_heads ||
      config.head_dim != layout.head_dim)
    throw std::invalid_argument(name_ + ": layout shape does not match the model config");
  if (n_heads_ <= 0 || n_heads_ % layout.n_kv_heads != 0)
    throw std::invalid_argument(name_ + ": num_attention_heads " + std::to_string(n_heads_) +
                                " is not a positive multiple of num_key_value_heads " +
                                std::to_string(layout.n_kv_heads));
  if (max_tokens <= 0)
    throw std::invalid_argument(name_ + ": max_tokens must be positive, got " + std::to_string(max_tokens));
  if (flush_at < layout.group)
    throw std::invalid_argument(name_ + ": the window must hold at least one group (" +
                                std::to_string(layout.group) + " tokens) before flushing, got " +
                                std::to_string(flush_at));
  layers_.resize(std::size_t(layout.n_layers));
}

quantized_cache::layer_state& quantized_cache::at(int layer, const char* op) {
  return const_cast<layer_state&>(std::as_const(*this).at(layer, op));
}

const quantized_cache::layer_state& quantized_cache::at(int layer, const char* op) const {
  if (layer < 0 || std::size_t(layer) >= layers_.size())
    throw std::out_of_range(name_ + "::" + op + ": layer " + std::to_string(layer) + " outside [0, " +
                            std::to_string(layers_.size()) + ")");
  return layers_[std::size_t(layer)];
}

std::int64_t quantized_cache::length(int layer) const {
  const layer_state& l = at(layer, "length");
  return l.quantized + l.window;
}
std::int64_t quantized_cache::quantized(int layer) const { return at(layer, "quantized").quantized; }
std::int64_t quantized_cache::window(int layer) const { return at(layer, "window").window; }
const float* quantized_cache::window_keys(int layer) const { return at(layer, "window_keys").win_k.data(); }
const float* quantized_cache::window_values(int layer) const { return at(layer, "window_values").win_v.data(); }

void quantized_cache::flush_group(layer_state& l, std::int64_t row0) {
  namespace kc = kernels::cpu;
  const kv_layout& L = layout_;
  const std::int64_t G = L.group, heads = L.n_kv_heads, d = L.head_dim;
  const std::int64_t block = L.key_block_bytes(), row = L.value_row_bytes(), vgroups = L.value_groups();
  const bool hier = rule_ == kc::quant_rule::hier;
  const std::int64_t group_index = l.quantized / G;
  l.k_codes.resize(std::size_t((group_index + 1) * heads * block));
  l.k_scale.resize(std::size_t((group_index + 1) * heads * d));
  l.k_zero.resize(l.k_scale.size());
  l.v_codes.resize(std::size_t((l.quantized + G) * heads * row));
  l.v_scale.resize(std::size_t((l.quantized + G) * heads * vgroups));
  l.v_zero.resize(l.v_scale.size());
  if (hier) {
    l.k_lower.resize(l.k_codes.size());
    l.v_lower.resize(l.v_codes.size());
  }
  auto per_head = [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t h = b; h < e; ++h) {
      const std::int64_t kb = (group_index * heads + h);
      kc::quant_out ko{l.k_codes.data() + kb * block, hier ? l.k_lower.data() + kb * block : nullptr,
                       l.k_scale.data() + kb * d, l.k_zero.data() + kb * d};
      kc::quantize_key_group(l.win_k.data() + row0 * kv_dim_ + h * d, kv_dim_, G, d, L.bits, rule_, ko);
      const std::int64_t vr = l.quantized * heads + h;
      kc::quant_out vo{l.v_codes.data() + vr * row, hier ? l.v_lower.data() + vr * row : nullptr,
                       l.v_scale.data() + vr * vgroups, l.v_zero.data() + vr * vgroups};
      kc::quantize_value_rows(l.win_v.data() + row0 * kv_dim_ + h * d, kv_dim_, G, d, L.value_group, L.bits, rule_, vo, heads * row,
                              heads * vgroups);
    }
  };
  if (pool_)
    pool_->parallel_for(heads, per_head);
  else
    per_head(0, heads);
  l.quantized += G;
}

void quantized_cache::append(int layer, const float* k, const float* v, std::int64_t n) {
  layer_state& l = at(layer, "append");
  if (n < 0) throw std::invalid_argument(name_ + "::append: negative token count");
  if (l.quantized + l.window + n > max_tokens_)
    throw std::length_error(name_ + "::append: layer " + std::to_string(layer) + " holds " +
                            std::to_string(l.quantized + l.window) + " tokens; " + std::to_string(n) +
                            " more exceed the capacity of " + std::to_string(max_tokens_));
  if (n == 0) return;
  // Quantize every due group first, then drop them from the window at once
  // (one move of the window, however long the last prefill chunk was).
  std::int64_t flushed = 0;
  for (; l.window - flushed >= flush_at_; flushed += layout_.group) flush_group(l, flushed);
  if (flushed) {
    const auto drop = std::ptrdiff_t(flushed * kv_dim_);
    l.win_k.erase(l.win_k.begin(), l.win_k.begin() + drop);
    l.win_v.erase(l.win_v.begin(), l.win_v.begin() + drop);
    l.window -= flushed;
  }
  l.win_k.insert(l.win_k.end(), k, k + n * kv_dim_);
  l.win_v.insert(l.win_v.end(), v, v + n * kv_dim_);
  l.window += n;
}

kernels::cpu::packed_kv quantized_cache::packed(int layer, bool with_lower) const {
  const layer_state& l = at(layer, "packed");
  kernels::cpu::packed_kv p;
  p.bits = layout_.bits;
  p.group = layout_.group;
  p.value_group = layout_.value_group;
  p.n_tokens = l.quantized;
  p.k_codes = l.k_codes.data();
  p.k_scale = l.k_scale.data();
  p.k_zero = l.k_zero.data();
  p.v_codes = l.v_codes.data();
  p.v_scale = l.v_scale.data();
  p.v_zero = l.v_zero.data();
  if (with_lower && rule_ == kernels::cpu::quant_rule::hier) {
    p.k_lower = l.k_lower.data();
    p.v_lower = l.v_lower.data();
  }
  return p;
}

kernels::cpu::quantized_attention_args quantized_cache::attention_args(int layer, const float* q, std::int64_t n,
                                                                      std::int64_t pos0, float* out,
                                                                      bool with_lower) const {
  const layer_state& l = at(layer, "attend");
  kernels::cpu::quantized_attention_args a;
  a.q = q;
  a.out = out;
  a.n = n;
  a.pos0 = pos0;
  a.n_heads = n_heads_;
  a.n_kv_heads = layout_.n_kv_heads;
  a.head_dim = layout_.head_dim;
  a.kv = packed(layer, with_lower);
  a.win_k = l.win_k.data();
  a.win_v = l.win_v.data();
  a.win_len = l.window;
  return a;
}

void quantized_cache::attend(int layer, const float* q, std::int64_t n, std::int64_t pos0, float* out) {
  kernels::cpu::quantized_attention(attention_args(layer, q, n, pos0, out, read_lower_), pool_);
}

void quantized_cache::truncate(std::int64_t n) {
  if (n < 0) throw std::invalid_argument(name_ + "::truncate: negative length");
  if (n == 0) {
    for (auto& l : layers_) l = layer_state{};
    return;
  }
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const layer_state& l = layers_[i];
    if (n < l.quantized + l.window && n < l.quantized)
      throw std::invalid_argument(name_ + "::truncate: cannot roll back to " + std::to_string(n) +
                                  " tokens: layer " + std::to_string(i) + " has quantized positions 0.." +
                                  std::to_string(l.quantized - 1) + " and only the " + std::to_string(l.window) +
                                  " full-precision window tokens after them can be dropped");
  }
  for (auto& l : layers_) {
    if (n >= l.quantized + l.window) continue;
    l.window = n - l.quantized;
    l.win_k.resize(std::size_t(l.window * kv_dim_));
    l.win_v.resize(std::size_t(l.window * kv_dim_));
  }
}

std::size_t quantized_cache::bytes_used() const {
  kv_layout one = layout_;
  one.n_layers = 1;
  std::size_t total = 0;
  for (const auto& l : layers_) total += one.bytes(l.quantized, l.window, sizeof(float));
  return total;
}

std::vector<std::uint8_t> quantized_cache::packed_bytes(int layer) const {
  const layer_state& l = at(layer, "packed_bytes");
  std::vector<std::uint8_t> out;
  auto put = [&](const auto& v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(v.data());
    out.insert(out.end(), p, p + v.size() * sizeof(v[0]));
  };
  put(l.k_codes);
  put(l.k_lower);
  put(l.k_scale);
  put(l.k_zero);
  put(l.v_codes);
  put(l.v_lower);
  put(l.v_scale);
  put(l.v_zero);
  return out;
}

}  // namespace specpipe
