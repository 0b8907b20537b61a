#include "model/weights.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "model/model_error.hpp"
#include "tests/model/safetensors_writer.hpp"

namespace specpipe {
namespace {

using test::fake_tensor;
using ::testing::HasSubstr;

const std::filesystem::path hf_dir = std::filesystem::path(SPECPIPE_TEST_DATA_DIR) / "hf";

void expect_shape(const tensor_view& v, std::initializer_list<std::int64_t> dims, const char* what) {
  ASSERT_FALSE(v.empty()) << what;
  ASSERT_EQ(v.rank, int(dims.size())) << what;
  int i = 0;
  for (auto d : dims) EXPECT_EQ(v.dim(i++), d) << what;
  EXPECT_TRUE(v.contiguous()) << what;
  EXPECT_EQ(v.where, memory_kind::host) << what;
}

// Mean and standard deviation of an f32 tensor: the fixtures draw norms from
// 1 + N(0, 0.1), embeddings from N(0, 0.5) and projections from N(0, 0.1), so
// a view onto the wrong bytes shows up here.
std::pair<double, double> moments(const tensor_view& v) {
  double s = 0, s2 = 0;
  const auto n = v.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = v.as<const float>()[i];
    s += x;
    s2 += x * x;
  }
  const double mean = s / double(n);
  return {mean, std::sqrt(std::max(0.0, s2 / double(n) - mean * mean))};
}

class weights_fixture : public ::testing::TestWithParam<const char*> {};

TEST_P(weights_fixture, binds_every_tensor_with_config_shapes) {
  const auto dir = hf_dir / GetParam();
  const model_config c = load_model_config(dir / "config.json");
  const checkpoint ckpt(dir);
  const model_weights w = bind_weights(ckpt, c);
  expect_shape(w.embed, {c.vocab_size, c.hidden_size}, "embed");
  expect_shape(w.final_norm, {c.hidden_size}, "final_norm");
  expect_shape(w.lm_head, {c.vocab_size, c.hidden_size}, "lm_head");
  if (c.tie_word_embeddings) EXPECT_EQ(w.lm_head.data, w.embed.data);
  else EXPECT_NE(w.lm_head.data, w.embed.data);
  ASSERT_EQ(std::int64_t(w.layers.size()), c.num_hidden_layers);
  for (const layer_weights& l : w.layers) {
    expect_shape(l.attn_norm, {c.hidden_size}, "attn_norm");
    expect_shape(l.wq, {c.q_dim(), c.hidden_size}, "wq");
    expect_shape(l.wk, {c.kv_dim(), c.hidden_size}, "wk");
    expect_shape(l.wv, {c.kv_dim(), c.hidden_size}, "wv");
    expect_shape(l.wo, {c.hidden_size, c.q_dim()}, "wo");
    expect_shape(l.mlp_norm, {c.hidden_size}, "mlp_norm");
    expect_shape(l.w_gate, {c.intermediate_size, c.hidden_size}, "w_gate");
    expect_shape(l.w_up, {c.intermediate_size, c.hidden_size}, "w_up");
    expect_shape(l.w_down, {c.hidden_size, c.intermediate_size}, "w_down");
    EXPECT_EQ(l.wq.type, dtype::f32);
    auto [norm_mean, norm_sd] = moments(l.attn_norm);
    EXPECT_NEAR(norm_mean, 1.0, 0.1);
    EXPECT_NEAR(norm_sd, 0.1, 0.05);
    auto [q_mean, q_sd] = moments(l.wq);
    EXPECT_NEAR(q_mean, 0.0, 0.02);
    EXPECT_NEAR(q_sd, 0.1, 0.02);
    auto [d_mean, d_sd] = moments(l.w_down);
    EXPECT_NEAR(d_sd, 0.1, 0.02);
    (void)d_mean;
  }
  auto [e_mean, e_sd] = moments(w.embed);
  EXPECT_NEAR(e_mean, 0.0, 0.05);
  EXPECT_NEAR(e_sd, 0.5, 0.05);
  // Distinct layers are distinct tensors.
  EXPECT_NE(w.layers[0].wq.data, w.layers[1].wq.data);
}

INSTANTIATE_TEST_SUITE_P(hf, weights_fixture, ::testing::Values("llama3", "mistral", "llama2_sharded"));

// A tiny checkpoint written from the test: hidden 4, 2 heads of 2, 1 kv head,
// intermediate 6, vocab 5, one layer.
class weights_errors : public test::temp_dir_test {
 protected:
  model_config config() const {
    model_config c;
    c.model_type = "llama";
    c.vocab_size = 5;
    c.hidden_size = 4;
    c.intermediate_size = 6;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 2;
    return c;
  }
  std::vector<fake_tensor> tensors() const {
    const std::string p = "model.layers.0.";
    return {{"model.embed_tokens.weight", "F32", {5, 4}},
            {"model.norm.weight", "F32", {4}},
            {"lm_head.weight", "F32", {5, 4}},
            {p + "input_layernorm.weight", "F32", {4}},
            {p + "self_attn.q_proj.weight", "F32", {4, 4}},
            {p + "self_attn.k_proj.weight", "F32", {2, 4}},
            {p + "self_attn.v_proj.weight", "F32", {2, 4}},
            {p + "self_attn.o_proj.weight", "F32", {4, 4}},
            {p + "post_attention_layernorm.weight", "F32", {4}},
            {p + "mlp.gate_proj.weight", "BF16", {6, 4}, {}, 2},
            {p + "mlp.up_proj.weight", "F16", {6, 4}, {}, 2},
            {p + "mlp.down_proj.weight", "F32", {4, 6}}};
  }
  std::vector<fake_tensor> without(const std::string& name) const {
    auto t = tensors();
    std::erase_if(t, [&](const fake_tensor& f) { return f.name == name; });
    return t;
  }
  model_error bind_fails(const std::vector<fake_tensor>& t, const model_config& c) {
    test::write_safetensors(file(), t);
    const checkpoint ckpt(dir_);
    try {
      bind_weights(ckpt, c);
    } catch (const model_error& e) {
      return e;
    }
    ADD_FAILURE() << "bind_weights accepted the checkpoint";
    return model_error("", "", "");
  }
  std::filesystem::path file() const { return dir_ / "model.safetensors"; }
};

TEST_F(weights_errors, valid_tiny_checkpoint_binds_mixed_dtypes) {
  test::write_safetensors(file(), tensors());
  const checkpoint ckpt(dir_);
  const model_weights w = bind_weights(ckpt, config());
  EXPECT_EQ(w.layers.at(0).w_gate.type, dtype::bf16);
  EXPECT_EQ(w.layers.at(0).w_up.type, dtype::f16);
  EXPECT_EQ(w.layers.at(0).wk.dim(0), 2);
}

TEST_F(weights_errors, missing_tensor_is_named) {
  const auto e = bind_fails(without("model.layers.0.self_attn.v_proj.weight"), config());
  EXPECT_EQ(e.field(), "model.layers.0.self_attn.v_proj.weight");
  EXPECT_THAT(e.what(), HasSubstr("tensor not found"));
}

TEST_F(weights_errors, untied_model_without_lm_head_fails) {
  const auto e = bind_fails(without("lm_head.weight"), config());
  EXPECT_EQ(e.field(), "lm_head.weight");
  EXPECT_THAT(e.what(), HasSubstr("tie_word_embeddings is false"));
}

TEST_F(weights_errors, tied_model_uses_the_embedding) {
  test::write_safetensors(file(), without("lm_head.weight"));
  const checkpoint ckpt(dir_);
  model_config c = config();
  c.tie_word_embeddings = true;
  const model_weights w = bind_weights(ckpt, c);
  EXPECT_EQ(w.lm_head.data, w.embed.data);
}

TEST_F(weights_errors, wrong_shape_says_expected_and_found) {
  auto t = tensors();
  for (auto& f : t)
    if (f.name == "model.layers.0.self_attn.k_proj.weight") f.shape = {4, 4};
  auto e = bind_fails(t, config());
  EXPECT_EQ(e.file(), file());
  EXPECT_EQ(e.field(), "model.layers.0.self_attn.k_proj.weight");
  EXPECT_THAT(e.what(), HasSubstr("expected shape [2, 4] (num_key_value_heads * head_dim x hidden_size), found [4, 4]"));

  t = tensors();
  for (auto& f : t)
    if (f.name == "model.norm.weight") f.shape = {1, 4};
  e = bind_fails(t, config());
  EXPECT_THAT(e.what(), HasSubstr("model.norm.weight: expected shape [4] (hidden_size), found [1, 4]"));

  model_config bigger_vocab = config();
  bigger_vocab.vocab_size = 6;
  e = bind_fails(tensors(), bigger_vocab);
  EXPECT_THAT(e.what(), HasSubstr("model.embed_tokens.weight: expected shape [6, 4] (vocab_size x hidden_size), found [5, 4]"));
}

TEST_F(weights_errors, non_float_dtype_is_rejected) {
  auto t = tensors();
  for (auto& f : t)
    if (f.name == "model.layers.0.mlp.down_proj.weight") f.dtype = "I32";
  const auto e = bind_fails(t, config());
  EXPECT_EQ(e.field(), "model.layers.0.mlp.down_proj.weight");
  EXPECT_THAT(e.what(), HasSubstr("dtype i32 is not a weight dtype (expected f32, f16 or bf16)"));
}

TEST_F(weights_errors, extra_layers_are_a_mismatch) {
  model_config c = config();
  auto t = tensors();
  t.push_back({"model.layers.1.input_layernorm.weight", "F32", {4}});
  const auto e = bind_fails(t, c);
  EXPECT_THAT(e.what(), HasSubstr("more layers than num_hidden_layers = 1"));
}

}  // namespace
}  // namespace specpipe
