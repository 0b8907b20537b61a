#pragma once
// Shared by the quantized-cache tests: a small GQA shape, random K/V rows, the
// exact attention a cache must reproduce from its own packed part (dequantized
// in the test) and window, and greedy decoding on the default model.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/quant_reference.hpp"
#include "model/config.hpp"
#include "model/forward.hpp"
#include "model/model.hpp"
#include "model/quantized_cache.hpp"
#include "support/test_paths.hpp"
#include "support/test_util.hpp"

namespace specpipe::test {

inline model_config small_shape() {
  model_config c;
  c.model_type = "llama";
  c.num_hidden_layers = 2;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;
  c.head_dim = 80;
  c.hidden_size = 480;
  c.vocab_size = 16;
  c.max_position_embeddings = 4096;
  return c;
}

struct kv_source {
  std::mt19937_64 rng;
  std::int64_t kv_dim;
  std::vector<float> k, v;  // the last batch
  explicit kv_source(std::int64_t kv_dim_, std::uint64_t seed = default_seed) : rng(seed), kv_dim(kv_dim_) {}
  void next(std::int64_t n) {
    k = random_floats(rng, std::size_t(n * kv_dim), -1.0f, 1.0f, 0.02);
    v = random_floats(rng, std::size_t(n * kv_dim), -1.0f, 1.0f, 0.02);
  }
};

// Appends n tokens to every layer of the cache.
inline void append_all(cache_policy& c, kv_source& src, std::int64_t n, int layers) {
  src.next(n);
  for (int l = 0; l < layers; ++l) c.append(l, src.k.data(), src.v.data(), n);
}

// Exact attention over the cache's dequantized packed part plus its window.
inline std::vector<float> reference_attend(const quantized_cache& c, int layer, const model_config& cfg,
                                           const std::vector<float>& q, std::int64_t n, std::int64_t pos0,
                                           bool with_lower) {
  const auto p = c.packed(layer, with_lower);
  auto k = ref_dequantize_keys(p, cfg.num_key_value_heads, cfg.head_dim);
  auto v = ref_dequantize_values(p, cfg.num_key_value_heads, cfg.head_dim);
  const std::size_t w = std::size_t(c.window(layer) * cfg.kv_dim());
  k.insert(k.end(), c.window_keys(layer), c.window_keys(layer) + w);
  v.insert(v.end(), c.window_values(layer), c.window_values(layer) + w);
  std::vector<float> out(std::size_t(n * cfg.q_dim()));
  kernels::cpu::attention_args a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.len = c.length(layer);
  a.out = out.data();
  a.n = n;
  a.pos0 = pos0;
  a.n_heads = cfg.num_attention_heads;
  a.n_kv_heads = cfg.num_key_value_heads;
  a.head_dim = cfg.head_dim;
  kernels::cpu::attention(a);
  return out;
}

inline std::int32_t argmax(const std::vector<float>& x) {
  return std::int32_t(std::max_element(x.begin(), x.end()) - x.begin());
}

// Greedy continuation of `prompt` for `steps` tokens over `cache`.
inline std::vector<std::int32_t> greedy(cpu_forward& fwd, cache_policy& cache, std::vector<std::int32_t> prompt,
                                        int steps, std::vector<std::vector<float>>* logits_out = nullptr) {
  std::vector<float> logits(std::size_t(fwd.config().vocab_size));
  std::vector<std::int32_t> out;
  fwd.forward(prompt, cache, logits);
  for (int i = 0; i < steps; ++i) {
    if (logits_out) logits_out->push_back(logits);
    out.push_back(argmax(logits));
    const std::int32_t t[1] = {out.back()};
    fwd.forward(t, cache, logits);
  }
  return out;
}

inline std::vector<std::int32_t> long_prompt(const model& m) {
  std::string text;
  for (int i = 0; i < 6; ++i)
    text += "The old house stood at the end of the lane, and every evening the children ran past it to the river. ";
  return m.tok.encode(text, m.tok.add_bos_default());
}

}  // namespace specpipe::test
