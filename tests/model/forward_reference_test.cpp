// The forward pass against an independent PyTorch implementation of HF's
// modeling_llama (fixture written by tools/make_forward_ref.py): GQA, llama3
// RoPE scaling with both scaled and interpolated frequency bands.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "model/forward.hpp"
#include "support/test_util.hpp"

namespace specpipe {
namespace {

std::vector<float> read_f32(const std::string& name) {
  const std::string path = std::string(SPECPIPE_TEST_DATA_DIR) + "/forward_ref/" + name;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

TEST(forward_reference, logits_match_pytorch_llama) {
  model_config c;
  c.model_type = "llama";
  c.vocab_size = 40;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-5;
  c.rope.theta = 10000.0;
  c.rope.type = "llama3";
  c.rope.factor = 8.0;
  c.rope.low_freq_factor = 1.0;
  c.rope.high_freq_factor = 4.0;
  c.rope.original_max_position_embeddings = 16;
  const std::vector<std::int32_t> prompt = {1, 7, 39, 3, 22, 0, 15, 15, 8, 31,
                                            12, 5, 19, 26, 2, 33, 11, 4, 9, 30};

  auto blob = read_f32("model.bin");
  const auto expected = read_f32("logits.bin");
  ASSERT_EQ(expected.size(), prompt.size() * std::size_t(c.vocab_size));
  std::size_t at = 0;
  auto take = [&](std::int64_t rows, std::int64_t cols) {
    const std::size_t count = std::size_t(rows * (cols < 0 ? 1 : cols));
    if (at + count > blob.size()) throw std::runtime_error("model.bin is too short");
    float* p = blob.data() + at;
    at += count;
    return cols < 0 ? tensor_view(p, dtype::f32, {rows}) : tensor_view(p, dtype::f32, {rows, cols});
  };
  model_weights w;
  w.embed = take(c.vocab_size, c.hidden_size);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    layer_weights lw;
    lw.attn_norm = take(c.hidden_size, -1);
    lw.wq = take(c.q_dim(), c.hidden_size);
    lw.wk = take(c.kv_dim(), c.hidden_size);
    lw.wv = take(c.kv_dim(), c.hidden_size);
    lw.wo = take(c.hidden_size, c.q_dim());
    lw.mlp_norm = take(c.hidden_size, -1);
    lw.w_gate = take(c.intermediate_size, c.hidden_size);
    lw.w_up = take(c.intermediate_size, c.hidden_size);
    lw.w_down = take(c.hidden_size, c.intermediate_size);
    w.layers.push_back(lw);
  }
  w.final_norm = take(c.hidden_size, -1);
  w.lm_head = take(c.vocab_size, c.hidden_size);
  ASSERT_EQ(at, blob.size()) << "model.bin holds more than the config describes";

  cpu_forward fwd(c, w, 2);
  auto cache = make_full_cache(c, 32);
  std::vector<float> logits(expected.size());
  fwd.forward(prompt, *cache, logits, true);
  EXPECT_TRUE(test::all_close(logits.data(), expected.data(), logits.size(), 1e-4, 1e-4));

  // And decoding the prompt token by token lands on the same last row.
  auto step_cache = make_full_cache(c, 32);
  std::vector<float> last(std::size_t(c.vocab_size));
  for (std::size_t i = 0; i < prompt.size(); ++i)
    fwd.forward(std::span(prompt).subspan(i, 1), *step_cache, last);
  EXPECT_TRUE(test::all_close(last.data(), expected.data() + (prompt.size() - 1) * last.size(),
                              last.size(), 1e-4, 1e-4));
}

}  // namespace
}  // namespace specpipe
