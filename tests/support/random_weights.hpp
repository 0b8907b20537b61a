#pragma once
// Random Llama weights held in host memory, for tests that need a whole model
// without a checkpoint: embeddings uniform in [-1, 1], projections uniform in
// [-scale, scale], norm gains in [0.8, 1.2] (as vectors, as in a checkpoint),
// every value on the bf16 grid so a GPU copy holds exactly the same numbers.
#include <cstdint>
#include <random>
#include <vector>

#include "memory/dtype.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace specpipe::test {

// A small GQA Llama for the GPU model tests: 3 layers, 8 query heads over 2
// KV heads of 64, vocabulary 300.
inline model_config small_gqa_config() {
  model_config c;
  c.model_type = "llama";
  c.vocab_size = 300;
  c.hidden_size = 256;
  c.intermediate_size = 680;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.max_position_embeddings = 2048;
  c.rope.theta = 10000.0;
  return c;
}

struct random_weights {
  std::vector<std::vector<std::uint32_t>> store;  // 4-byte words: room for f32 or bf16
  model_weights w;

  // `stored`: f32 (bf16-rounded values) or bf16.
  random_weights(const model_config& c, unsigned seed, float scale, dtype stored) {
    store.reserve(4 + 9 * std::size_t(c.num_hidden_layers));
    std::mt19937 rng(seed);
    auto make = [&](std::int64_t rows, std::int64_t cols, float lo, float hi) {
      std::uniform_real_distribution<float> u(lo, hi);
      const auto n = std::size_t(rows * cols);
      store.emplace_back(stored == dtype::f32 ? n : (n + 1) / 2);
      void* data = store.back().data();
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t h = f32_to_bf16(u(rng));
        if (stored == dtype::f32) static_cast<float*>(data)[i] = bf16_to_f32(h);
        else static_cast<std::uint16_t*>(data)[i] = h;
      }
      if (rows == 1) return tensor_view(data, stored, {cols});
      return tensor_view(data, stored, {rows, cols});
    };
    const float a = scale;
    w.embed = make(c.vocab_size, c.hidden_size, -1.f, 1.f);
    w.final_norm = make(1, c.hidden_size, 0.8f, 1.2f);
    w.lm_head = make(c.vocab_size, c.hidden_size, -a, a);
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
      layer_weights L;
      L.attn_norm = make(1, c.hidden_size, 0.8f, 1.2f);
      L.wq = make(c.q_dim(), c.hidden_size, -a, a);
      L.wk = make(c.kv_dim(), c.hidden_size, -a, a);
      L.wv = make(c.kv_dim(), c.hidden_size, -a, a);
      L.wo = make(c.hidden_size, c.q_dim(), -a, a);
      L.mlp_norm = make(1, c.hidden_size, 0.8f, 1.2f);
      L.w_gate = make(c.intermediate_size, c.hidden_size, -a, a);
      L.w_up = make(c.intermediate_size, c.hidden_size, -a, a);
      L.w_down = make(c.hidden_size, c.intermediate_size, -a, a);
      w.layers.push_back(L);
    }
  }
  random_weights(random_weights&&) = default;  // views point into heap buffers: moving keeps them valid
};

}  // namespace specpipe::test
