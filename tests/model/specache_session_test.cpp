// SpeCache driven synchronously (model/specache_session): the invariant that
// with k at least the context the output equals the full cache's, both
// prefetch modes, what a small k costs, the statistics and the memory
// accounting; and the cache's own bookkeeping (two-row steps keep one row,
// candidates are the positions the next step holds packed).
#include <gtest/gtest.h>

#include <cmath>

#include "model/decode_session.hpp"
#include "model/kv_mode.hpp"
#include "model/quant_cache_support.hpp"
#include "model/specache_session.hpp"

namespace specpipe {
namespace {

std::vector<std::int32_t> greedy_session(decode_session& s, const std::vector<std::int32_t>& prompt, int steps,
                                         std::int64_t vocab, std::vector<std::vector<float>>* logits_out = nullptr) {
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  std::vector<std::int32_t> out;
  s.prefill(prompt, logits);
  for (int i = 0; i < steps; ++i) {
    if (logits_out) logits_out->push_back(logits);
    out.push_back(test::argmax(logits));
    s.step(out.back(), logits);
  }
  return out;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    den = std::max(den, std::abs(double(b[i])));
  }
  return num / den;
}

struct Fixture : ::testing::Test {
  static void SetUpTestSuite() { m = new model(model::load(test::default_model_dir())); }
  static void TearDownTestSuite() { delete m; }
  static model* m;

  specache_config config(int k, specache_prefetch p, int bits = 1) const {
    specache_config c;
    c.cache.bits = bits;
    c.cache.group = 32;
    c.cache.residual = 32;
    c.topk = k;
    c.prefetch = p;
    return c;
  }
};
model* Fixture::m = nullptr;

using SpecacheSession = Fixture;

TEST_F(SpecacheSession, WithKAtLeastTheContextGreedyOutputEqualsTheFullCache) {
  cpu_forward fwd(m->config, m->weights, 2);
  const auto prompt = test::long_prompt(*m);
  const int steps = 24;
  const std::int64_t max_tokens = std::int64_t(prompt.size()) + steps + 1;
  auto full = make_cache_session(fwd, make_full_cache(m->config, max_tokens, &fwd.pool()));
  std::vector<std::vector<float>> lf;
  const auto want = greedy_session(*full, prompt, steps, m->config.vocab_size, &lf);
  for (const auto prefetch : {specache_prefetch::speculative, specache_prefetch::output})
    for (const int bits : {1, 2}) {
      specache_session s(fwd, config(1024, prefetch, bits), max_tokens);
      std::vector<std::vector<float>> ls;
      const auto got = greedy_session(s, prompt, steps, m->config.vocab_size, &ls);
      const char* mode = prefetch == specache_prefetch::output ? "output" : "speculative";
      ASSERT_GT(s.cache().low_bit().quantized(0), 64) << "the history must be mostly low-bit";
      EXPECT_EQ(got, want) << mode << " " << bits << "-bit";
      // Every packed row is replaced by its 16-bit value: the logits differ
      // from the full cache's by f16 rounding of K/V only.
      for (std::size_t i = 0; i < ls.size(); ++i)
        EXPECT_LT(max_rel_diff(ls[i], lf[i]), 2e-3) << mode << " step " << i;
      // Every needed row was there.
      EXPECT_EQ(s.stats().steps, steps);
      EXPECT_GT(s.stats().needed, 0);
      EXPECT_EQ(s.stats().hits, s.stats().needed) << mode;
    }
}

TEST_F(SpecacheSession, TheSubstitutedRowsAreWhatRecoverTheFullCache) {
  // Without any 16-bit rows the 1-bit copy alone is far from the full cache;
  // the same run with every row fetched is within rounding. Guards against a
  // session that silently reads no rows.
  cpu_forward fwd(m->config, m->weights, 2);
  const auto prompt = test::long_prompt(*m);
  const std::int64_t max_tokens = std::int64_t(prompt.size()) + 8;
  auto full = make_cache_session(fwd, make_full_cache(m->config, max_tokens, &fwd.pool()));
  auto low = make_cache_session(fwd, make_kv_cache(parse_kv_mode("specache", 1, 32, 32), m->config, max_tokens,
                                                   &fwd.pool()));
  specache_session all(fwd, config(1024, specache_prefetch::speculative), max_tokens);
  std::vector<std::vector<float>> lf, ll, la;
  greedy_session(*full, prompt, 4, m->config.vocab_size, &lf);
  greedy_session(*low, prompt, 4, m->config.vocab_size, &ll);
  greedy_session(all, prompt, 4, m->config.vocab_size, &la);
  // Step 0 is the prefill's (full precision everywhere); later steps differ.
  for (std::size_t i = 1; i < lf.size(); ++i) {
    EXPECT_GT(max_rel_diff(ll[i], lf[i]), 20 * max_rel_diff(la[i], lf[i])) << "step " << i;
  }
}

TEST_F(SpecacheSession, SmallKFetchesKRowsPerHeadAndReportsItsRates) {
  cpu_forward fwd(m->config, m->weights, 2);
  const auto prompt = test::long_prompt(*m);
  const int steps = 16, k = 8;
  const std::int64_t max_tokens = std::int64_t(prompt.size()) + steps + 1;
  specache_session s(fwd, config(k, specache_prefetch::speculative), max_tokens);
  const auto got = greedy_session(s, prompt, steps, m->config.vocab_size);
  ASSERT_EQ(got.size(), std::size_t(steps));
  const auto& st = s.stats();
  const std::int64_t per_step = k * m->config.num_key_value_heads * m->config.num_hidden_layers;
  // The pre-decode and every step choose a set for the step after.
  EXPECT_EQ(st.rows_fetched, per_step * (steps + 1));
  EXPECT_EQ(st.bytes_fetched, st.rows_fetched * 4 * m->config.head_dim);
  EXPECT_EQ(st.needed, per_step * steps);
  EXPECT_GT(st.hit_rate(), 0.2) << "speculation should predict some of the rows";
  EXPECT_LE(st.hits, st.needed);
  EXPECT_EQ(st.guesses, steps - 1);
  EXPECT_GE(st.guess_hits, 0);
  // Host store: every committed token's 16-bit K|V; device: the low-bit copy.
  const std::int64_t tokens = std::int64_t(prompt.size()) + steps;
  EXPECT_EQ(s.length(), tokens);
  EXPECT_EQ(std::int64_t(s.host_bytes()),
            tokens * m->config.num_hidden_layers * m->config.num_key_value_heads * 4 * m->config.head_dim);
  const auto& low = s.cache().low_bit();
  EXPECT_EQ(s.cache().bytes_used(), low.layout().bytes(low.quantized(0), low.window(0), 4));
}

TEST(SpecacheCache, TwoRowStepsKeepOneRowAndCandidatesFollowTheFlushRule) {
  const auto cfg = test::small_shape();
  specache_options o;
  o.group = 8;
  o.residual = 8;
  specache_cache c(cfg, 256, o);
  test::kv_source src(cfg.kv_dim());
  c.begin(specache_step::prefill);
  test::append_all(c, src, 20, 2);  // window 20 >= R + G: the next append flushes 8
  c.commit();
  EXPECT_EQ(c.fresh_kept(), 20);
  EXPECT_EQ(c.low_bit().quantized(0), 0);

  struct recorder final : specache_link {
    std::vector<specache_probs> spec;
    const specache_rows* rows(int) override { return nullptr; }
    void speculative(const specache_probs& p) override { spec.push_back(p); }
    const specache_rows* fetch_now(const specache_probs&) override { return nullptr; }
    void exact(const specache_probs&) override {}
  } link;
  c.set_link(&link);
  c.begin(specache_step::speculative);
  src.next(2);
  std::vector<float> q(std::size_t(2 * cfg.q_dim()), 0.1f), out(q.size());
  for (int l = 0; l < 2; ++l) {
    c.append(l, src.k.data(), src.v.data(), 2);
    // Flushed 8 before the append: 8 packed, 14 in the window (12 + 2 fresh).
    EXPECT_EQ(c.low_bit().quantized(l), 8);
    // After commit the window holds 13 < 16: the next step flushes nothing.
    EXPECT_EQ(c.next_quantized(l), 8);
    c.attend(l, q.data(), 2, 20, out.data());
  }
  c.commit();
  EXPECT_EQ(c.length(0), 21);
  EXPECT_EQ(c.fresh_kept(), 1);
  ASSERT_EQ(link.spec.size(), 2u);
  EXPECT_EQ(link.spec[0].position, 21);
  EXPECT_EQ(link.spec[0].candidates, 8);
  // Probabilities of the speculative row over its causal span sum to one.
  double sum = 0;
  for (std::int64_t j = 0; j <= 21; ++j) sum += link.spec[1].probs[j];
  EXPECT_NEAR(sum, 1.0, 1e-5);
  // A step announced as two rows refuses one.
  c.begin(specache_step::speculative);
  src.next(1);
  EXPECT_THROW(c.append(0, src.k.data(), src.v.data(), 1), std::invalid_argument);
}

}  // namespace
}  // namespace specpipe
