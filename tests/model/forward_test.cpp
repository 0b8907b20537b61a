#include "model/forward.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "kernels/cpu/thread_pool.hpp"
#include "model/full_cache.hpp"
#include "support/test_util.hpp"

namespace specpipe {
namespace {

using test::all_close;

// A tiny Llama with random weights, owned by the test; views in `weights`
// point into `storage`.
struct tiny_model {
  model_config config;
  model_weights weights;
  std::vector<std::vector<float>> f32_storage;
  std::vector<std::vector<std::uint16_t>> half_storage;

  tiny_model(dtype type, std::uint64_t seed, bool tied = false) {
    config.model_type = "llama";
    config.vocab_size = 61;
    config.hidden_size = 48;
    config.intermediate_size = 80;
    config.num_hidden_layers = 2;
    config.num_attention_heads = 4;
    config.num_key_value_heads = 2;
    config.head_dim = 12;
    config.max_position_embeddings = 256;
    config.rms_norm_eps = 1e-5;
    config.rope.theta = 10000.0;
    config.tie_word_embeddings = tied;
    std::mt19937_64 rng(seed);
    const auto h = config.hidden_size, q = config.q_dim(), kv = config.kv_dim(),
               inter = config.intermediate_size;
    weights.embed = make(rng, type, config.vocab_size, h, 1.0f);
    weights.final_norm = make(rng, type, h, -1, 0.0f);
    weights.lm_head = tied ? weights.embed : make(rng, type, config.vocab_size, h, 0.3f);
    for (int l = 0; l < config.num_hidden_layers; ++l) {
      layer_weights lw;
      lw.attn_norm = make(rng, type, h, -1, 0.0f);
      lw.wq = make(rng, type, q, h, 0.3f);
      lw.wk = make(rng, type, kv, h, 0.3f);
      lw.wv = make(rng, type, kv, h, 0.3f);
      lw.wo = make(rng, type, h, q, 0.3f);
      lw.mlp_norm = make(rng, type, h, -1, 0.0f);
      lw.w_gate = make(rng, type, inter, h, 0.3f);
      lw.w_up = make(rng, type, inter, h, 0.3f);
      lw.w_down = make(rng, type, h, inter, 0.3f);
      weights.layers.push_back(lw);
    }
  }

  // scale 0 builds a norm weight (values near 1), else uniform [-scale, scale).
  tensor_view make(std::mt19937_64& rng, dtype type, std::int64_t rows, std::int64_t cols, float scale) {
    const std::size_t count = std::size_t(rows * (cols < 0 ? 1 : cols));
    auto v = scale == 0.0f ? test::random_floats(rng, count, 0.8f, 1.2f)
                           : test::random_floats(rng, count, -scale, scale);
    void* data;
    if (type == dtype::f32) {
      f32_storage.push_back(std::move(v));
      data = f32_storage.back().data();
    } else {
      half_storage.push_back(test::to_half_codes(v, type));
      data = half_storage.back().data();
    }
    return cols < 0 ? tensor_view(data, type, {rows}) : tensor_view(data, type, {rows, cols});
  }
};

class forward_dtypes : public ::testing::TestWithParam<dtype> {};

const std::vector<std::int32_t> prompt = {1, 17, 42, 3, 60, 0, 29, 29, 8, 51, 13};

TEST_P(forward_dtypes, prefill_equals_token_by_token) {
  SCOPED_TRACE(test::seed_trace(test::default_seed));
  tiny_model m(GetParam(), test::default_seed);
  cpu_forward fwd(m.config, m.weights, 2);
  const auto vocab = std::size_t(m.config.vocab_size);
  const auto n = prompt.size();

  auto batch_cache = make_full_cache(m.config, 64, &fwd.pool());
  test::poisoned_output all(n * vocab);
  fwd.forward(prompt, *batch_cache, {all.data(), all.size()}, true);
  EXPECT_TRUE(all.check_sentinels());
  EXPECT_EQ(batch_cache->length(0), std::int64_t(n));
  EXPECT_EQ(batch_cache->length(1), std::int64_t(n));

  auto step_cache = make_full_cache(m.config, 64);
  for (std::size_t i = 0; i < n; ++i) {
    test::poisoned_output one(vocab);
    fwd.forward(std::span(prompt).subspan(i, 1), *step_cache, {one.data(), one.size()});
    EXPECT_TRUE(all_close(one.data(), all.data() + i * vocab, vocab, 1e-4, 0)) << "token " << i;
    EXPECT_TRUE(one.check_sentinels());
  }

  // Last-token-only logits are the last row of the full set.
  auto last_cache = make_full_cache(m.config, 64);
  std::vector<float> last(vocab);
  fwd.forward(prompt, *last_cache, last);
  EXPECT_TRUE(all_close(last.data(), all.data() + (n - 1) * vocab, vocab, 1e-6, 0));
  EXPECT_EQ(last_cache->bytes_used(), batch_cache->bytes_used());
}

TEST_P(forward_dtypes, truncate_and_rerun_reproduces_logits) {
  tiny_model m(GetParam(), test::default_seed + 1);
  cpu_forward fwd(m.config, m.weights, 1);
  const auto vocab = std::size_t(m.config.vocab_size);
  auto cache = make_full_cache(m.config, 64);
  std::vector<float> first(prompt.size() * vocab), again(4 * vocab), other(vocab);
  fwd.forward(prompt, *cache, first, true);
  // Roll back the last 4 tokens after decoding a different one in their place.
  cache->truncate(std::int64_t(prompt.size()) - 4);
  const std::int32_t detour = 5;
  fwd.forward(std::span(&detour, 1), *cache, other);
  cache->truncate(std::int64_t(prompt.size()) - 4);
  EXPECT_EQ(cache->length(0), std::int64_t(prompt.size()) - 4);
  fwd.forward(std::span(prompt).last(4), *cache, again, true);
  EXPECT_TRUE(all_close(again.data(), first.data() + (prompt.size() - 4) * vocab, 4 * vocab, 1e-5, 0));
}

INSTANTIATE_TEST_SUITE_P(weights, forward_dtypes, ::testing::Values(dtype::f32, dtype::bf16, dtype::f16));

TEST(forward, tied_embeddings_and_logits_depend_on_context) {
  tiny_model m(dtype::f32, test::default_seed + 2, true);
  cpu_forward fwd(m.config, m.weights, 2);
  const auto vocab = std::size_t(m.config.vocab_size);
  auto a = make_full_cache(m.config, 16), b = make_full_cache(m.config, 16);
  std::vector<float> la(2 * vocab), lb(2 * vocab);
  const std::vector<std::int32_t> ta = {3, 9}, tb = {4, 9};
  fwd.forward(ta, *a, la, true);
  fwd.forward(tb, *b, lb, true);
  // Same token at position 1 after different histories: attention must matter.
  EXPECT_FALSE(all_close(la.data() + vocab, lb.data() + vocab, vocab, 1e-3, 0));
  for (float x : la) EXPECT_TRUE(std::isfinite(x));
}

TEST(forward, invalid_inputs_are_rejected_with_context) {
  tiny_model m(dtype::f32, test::default_seed);
  cpu_forward fwd(m.config, m.weights, 1);
  auto cache = make_full_cache(m.config, 16);
  std::vector<float> logits(std::size_t(m.config.vocab_size));
  const std::vector<std::int32_t> bad = {1, 61};
  try {
    fwd.forward(bad, *cache, logits);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("token id 61"), std::string::npos) << msg;
    EXPECT_NE(msg.find("index 1"), std::string::npos) << msg;
  }
  EXPECT_EQ(cache->length(0), 0);  // nothing was appended
  const std::vector<std::int32_t> negative = {-3};
  EXPECT_THROW(fwd.forward(negative, *cache, logits), std::invalid_argument);
  const std::vector<std::int32_t> two = {1, 2};
  try {
    fwd.forward(two, *cache, logits, true);  // needs 2 x vocab
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("logits"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fwd.forward(std::span<const std::int32_t>(), *cache, logits), std::invalid_argument);
}

TEST(forward, weights_not_matching_config_are_named) {
  tiny_model m(dtype::f32, test::default_seed);
  m.weights.layers[1].wk.shape[0] = 7;
  try {
    cpu_forward fwd(m.config, m.weights, 1);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.self_attn.k_proj.weight"), std::string::npos)
        << e.what();
  }
}

TEST(full_cache, append_truncate_capacity_and_bytes) {
  tiny_model m(dtype::f32, test::default_seed);
  full_cache cache(m.config, 5);
  const auto kv = std::size_t(m.config.kv_dim());
  std::vector<float> k(3 * kv), v(3 * kv);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = float(i), v[i] = -float(i);
  cache.append(0, k.data(), v.data(), 3);
  cache.append(1, k.data(), v.data(), 2);
  EXPECT_EQ(cache.length(0), 3);
  EXPECT_EQ(cache.length(1), 2);
  EXPECT_EQ(cache.bytes_used(), (3 + 2) * kv * 4 * 2);
  EXPECT_EQ(std::memcmp(cache.keys(0), k.data(), 3 * kv * 4), 0);
  EXPECT_EQ(std::memcmp(cache.values(1), v.data(), 2 * kv * 4), 0);
  cache.append(0, k.data(), v.data(), 2);  // exactly at capacity
  EXPECT_EQ(cache.length(0), 5);
  try {
    cache.append(0, k.data(), v.data(), 1);
    FAIL() << "no exception";
  } catch (const std::length_error& e) {
    EXPECT_NE(std::string(e.what()).find("capacity of 5"), std::string::npos) << e.what();
  }
  cache.truncate(1);
  EXPECT_EQ(cache.length(0), 1);
  EXPECT_EQ(cache.length(1), 1);
  cache.truncate(4);  // never lengthens
  EXPECT_EQ(cache.length(0), 1);
  EXPECT_EQ(cache.bytes_used(), 2 * kv * 4 * 2);
  // Rows appended after a truncate overwrite the dropped ones.
  cache.append(0, k.data() + kv, v.data() + kv, 1);
  EXPECT_EQ(std::memcmp(cache.keys(0) + kv, k.data() + kv, kv * 4), 0);
  EXPECT_THROW(cache.length(2), std::out_of_range);
  // Attending to positions that are not stored is an error, not garbage.
  std::vector<float> q(std::size_t(m.config.q_dim())), out(q.size());
  EXPECT_THROW(cache.attend(1, q.data(), 1, 1, out.data()), std::invalid_argument);
}

}  // namespace
}  // namespace specpipe
