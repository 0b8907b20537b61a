// hier_cache (QuantSpec INT4/INT8): rollback through the double buffer without
// re-quantizing, reads, accounting, and INT8 greedy parity on the default model.
#include <gtest/gtest.h>

#include <string>

#include "model/hier_cache.hpp"
#include "model/kv_mode.hpp"
#include "model/quant_cache_support.hpp"

namespace specpipe {
namespace {

struct state {
  std::vector<std::uint8_t> packed;
  std::vector<float> wk, wv;
};

state snapshot(const hier_cache& c, int layer, std::int64_t kv_dim) {
  const std::size_t w = std::size_t(c.window(layer) * kv_dim);
  return {c.packed_bytes(layer), std::vector<float>(c.window_keys(layer), c.window_keys(layer) + w),
          std::vector<float>(c.window_values(layer), c.window_values(layer) + w)};
}

void expect_same(const hier_cache& a, const hier_cache& b, std::int64_t kv_dim, const std::string& where) {
  for (int l = 0; l < 2; ++l) {
    const auto x = snapshot(a, l, kv_dim), y = snapshot(b, l, kv_dim);
    EXPECT_EQ(a.quantized(l), b.quantized(l)) << where;
    EXPECT_EQ(x.packed, y.packed) << where << " layer " << l;
    EXPECT_EQ(x.wk, y.wk) << where;
    EXPECT_EQ(x.wv, y.wv) << where;
  }
}

// `base` tokens one by one, then n draft tokens rolled back, then `more`
// tokens: the same state as never having appended the draft.
void rollback_case(std::int64_t base, std::int64_t n, std::int64_t more) {
  SCOPED_TRACE("base " + std::to_string(base) + " rolled back " + std::to_string(n));
  const auto cfg = test::small_shape();
  const std::int64_t G = 32;
  hier_cache a(cfg, 1024, {G, hier_read::int8}), b(cfg, 1024, {G, hier_read::int8});
  test::kv_source sa(cfg.kv_dim(), 9), sb(cfg.kv_dim(), 9), draft(cfg.kv_dim(), 10);
  for (std::int64_t i = 0; i < base; ++i) {
    test::append_all(a, sa, 1, 2);
    test::append_all(b, sb, 1, 2);
  }
  const auto before = snapshot(a, 0, cfg.kv_dim());
  const std::int64_t q_before = a.quantized(0);
  test::append_all(a, draft, n, 2);  // the draft's tokens, verified then rejected
  const bool flushed = a.quantized(0) != q_before;
  a.truncate(base);
  ASSERT_EQ(a.length(0), base);
  if (!flushed) {
    // Nothing was quantized by the draft: byte-identical packed part and window.
    const auto after = snapshot(a, 0, cfg.kv_dim());
    EXPECT_EQ(after.packed, before.packed);
    EXPECT_EQ(after.wk, before.wk);
  } else {
    // The draft's append first flushed a group that was due anyway (the
    // buffer was full); the bytes quantized before are untouched.
    const auto after = snapshot(a, 0, cfg.kv_dim());
    ASSERT_GE(after.packed.size(), before.packed.size());
  }
  for (std::int64_t i = 0; i < more; ++i) {
    test::append_all(a, sa, 1, 2);
    test::append_all(b, sb, 1, 2);
    if (i == 0) expect_same(a, b, cfg.kv_dim(), "first append after the rollback");
  }
  expect_same(a, b, cfg.kv_dim(), "after " + std::to_string(more) + " more");
  // And attention agrees exactly.
  std::mt19937_64 rng(4);
  const auto q = test::random_floats(rng, std::size_t(cfg.q_dim()));
  std::vector<float> oa(q.size()), ob(q.size());
  a.attend(1, q.data(), 1, a.length(1) - 1, oa.data());
  b.attend(1, q.data(), 1, b.length(1) - 1, ob.data());
  EXPECT_EQ(oa, ob);
}

TEST(HierCache, RollbackOfFewerThanGTokensNeverRequantizes) {
  rollback_case(150, 5, 80);   // buffer below 2G when the draft arrives
  rollback_case(64, 5, 80);    // buffer exactly 2G: the draft's append flushes first
  rollback_case(100, 31, 3);   // n = G - 1
  rollback_case(10, 20, 70);   // nothing quantized yet
}

TEST(HierCache, RollbackPastTheBufferIsRefusedWithAClearMessage) {
  const auto cfg = test::small_shape();
  hier_cache c(cfg, 1024, {32, hier_read::int8});
  test::kv_source src(cfg.kv_dim());
  for (int i = 0; i < 150; ++i) test::append_all(c, src, 1, 2);
  ASSERT_EQ(c.quantized(0), 96);
  EXPECT_EQ(c.window(0), 54);
  c.truncate(150 - 32);  // G tokens: always allowed
  try {
    c.truncate(90);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("hier_cache::truncate: cannot roll back to 90"), std::string::npos) << e.what();
  }
}

TEST(HierCache, Int4AndInt8ReadsAttendOverTheirDequantizedCopies) {
  const auto cfg = test::small_shape();
  hier_cache c(cfg, 1024, {32, hier_read::int4});
  test::kv_source src(cfg.kv_dim());
  for (int i = 0; i < 141; ++i) test::append_all(c, src, 1, 2);
  EXPECT_EQ(c.bytes_used(), c.layout().bytes(c.quantized(0), c.window(0), 4));
  EXPECT_EQ(c.bytes_used(), std::size_t(2 * 2 * (96 / 32 * (2 * 80 * 16 + 80 * 4) + 96 * (2 * 40 + 3 * 4) +
                                                  45 * 80 * 2 * 4)));
  std::mt19937_64 rng(5);
  const auto q = test::random_floats(rng, std::size_t(3 * cfg.q_dim()));
  for (const auto read : {hier_read::int4, hier_read::int8}) {
    c.set_read(read);
    std::vector<float> out(q.size());
    c.attend(0, q.data(), 3, 138, out.data());
    const auto ref = test::reference_attend(c, 0, cfg, q, 3, 138, read == hier_read::int8);
    for (std::size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-5 + 1e-5 * std::abs(ref[i]));
  }
}

TEST(HierCache, Int8GreedyOutputOfTheDefaultModelMatchesTheFullCache) {
  const model m = model::load(test::default_model_dir());
  cpu_forward fwd(m.config, m.weights, 2);
  const auto prompt = test::long_prompt(m);
  auto full = make_full_cache(m.config, 512, &fwd.pool());
  // G = 32 so that most of the prompt is quantized (the 2G buffer holds < 64).
  auto hier = make_kv_cache(parse_kv_mode("hier", 8, 32, 0), m.config, 512, &fwd.pool());
  const auto a = test::greedy(fwd, *full, prompt, 12);
  const auto b = test::greedy(fwd, *hier, prompt, 12);
  ASSERT_GE(static_cast<const hier_cache&>(*hier).quantized(0), std::int64_t(prompt.size()) - 64);
  EXPECT_EQ(std::vector<std::int32_t>(a.begin(), a.begin() + 8), std::vector<std::int32_t>(b.begin(), b.begin() + 8));
}

}  // namespace
}  // namespace specpipe
