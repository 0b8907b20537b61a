// GQA-averaged top-k against a brute-force reference: exclusion of the own
// position, deterministic ties, k larger than the history.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/quant_packed_fixture.hpp"
#include "kernels/topk.hpp"

namespace specpipe {
namespace {

namespace kc = kernels::cpu;

std::vector<std::int64_t> brute(const std::vector<float>& probs, std::int64_t stride, std::int64_t len,
                                std::int64_t heads, std::int64_t kv_heads, std::int64_t g, std::int64_t k,
                                std::int64_t exclude) {
  const std::int64_t group = heads / kv_heads;
  std::vector<std::pair<double, std::int64_t>> s;
  for (std::int64_t j = 0; j < len; ++j) {
    if (j == exclude) continue;
    float sum = 0;
    for (std::int64_t h = g * group; h < (g + 1) * group; ++h) sum += probs[std::size_t(h * stride + j)];
    s.push_back({-double(sum), j});
  }
  std::sort(s.begin(), s.end());
  std::vector<std::int64_t> out;
  for (std::int64_t r = 0; r < std::min<std::int64_t>(k, std::int64_t(s.size())); ++r) out.push_back(s[std::size_t(r)].second);
  return out;
}

struct topk_run {
  std::vector<std::int64_t> pos, count;
  void run(const std::vector<float>& probs, std::int64_t stride, std::int64_t len, std::int64_t heads,
           std::int64_t kv_heads, std::int64_t k, std::int64_t exclude) {
    pos.assign(std::size_t(kv_heads * k), -7);
    count.assign(std::size_t(kv_heads), -7);
    std::vector<float> scores(static_cast<std::size_t>(len));
    std::vector<std::int64_t> index(static_cast<std::size_t>(len));
    kc::topk_args a{probs.data(), stride, len, heads, kv_heads, k, exclude, pos.data(), count.data(), scores.data(),
                    index.data()};
    kc::topk_gqa(a);
  }
};

TEST(TopK, MatchesBruteForceAndExcludesTheOwnPosition) {
  std::mt19937_64 rng(test::default_seed);
  const std::int64_t heads = 8, kv_heads = 2, len = 301, stride = 310, k = 64;
  auto probs = test::random_floats(rng, std::size_t(heads * stride), 0.0f, 1.0f, 0.05);
  for (auto& p : probs) p = std::abs(p);
  // Make the excluded position the most likely one: it must still be left out.
  const std::int64_t own = 300;
  for (std::int64_t h = 0; h < heads; ++h) probs[std::size_t(h * stride + own)] = 100.0f;
  topk_run t;
  t.run(probs, stride, len, heads, kv_heads, k, own);
  for (std::int64_t g = 0; g < kv_heads; ++g) {
    ASSERT_EQ(t.count[std::size_t(g)], k);
    const std::vector<std::int64_t> got(t.pos.begin() + g * k, t.pos.begin() + (g + 1) * k);
    EXPECT_EQ(got, brute(probs, stride, len, heads, kv_heads, g, k, own)) << "KV head " << g;
    EXPECT_EQ(std::count(got.begin(), got.end(), own), 0);
  }
}

TEST(TopK, TiesGoToTheLowerPositionAndShortHistoriesReturnAll) {
  const std::int64_t heads = 2, kv_heads = 1, len = 6;
  // Averages: 0.5 0.25 0.5 0.25 0.5 0.5 -> order 0 2 4 5 (ties by position), then 1 3.
  std::vector<float> probs = {0.5f, 0.25f, 0.5f, 0.25f, 0.5f, 0.5f, 0.5f, 0.25f, 0.5f, 0.25f, 0.5f, 0.5f};
  topk_run t;
  t.run(probs, len, len, heads, kv_heads, 3, 2);
  EXPECT_EQ(t.count[0], 3);
  EXPECT_EQ(std::vector<std::int64_t>(t.pos.begin(), t.pos.begin() + 3), (std::vector<std::int64_t>{0, 4, 5}));
  t.run(probs, len, len, heads, kv_heads, 10, -1);
  EXPECT_EQ(t.count[0], 6);
  EXPECT_EQ(std::vector<std::int64_t>(t.pos.begin(), t.pos.begin() + 6), (std::vector<std::int64_t>{0, 2, 4, 5, 1, 3}));
}

TEST(TopK, PicksFromTheSpeculativeRowsProbabilitiesOverTheLowBitCache) {
  // End to end on the CPU kernels: probabilities of one query over a packed
  // cache, then the top-k of each KV group; the brute force over the same probs agrees.
  test::packed_fixture f;
  f.bits = 1;
  f.rule = kc::quant_rule::specache;
  f.build(test::default_seed + 3);
  std::mt19937_64 rng(11);
  const auto q = test::random_floats(rng, std::size_t(f.heads * f.d));
  std::vector<float> out(q.size()), probs(std::size_t(f.heads * f.len()));
  auto a = f.args(q.data(), 1, f.len() - 1, out.data());
  a.probs = probs.data();
  a.probs_stride = f.len();
  kc::quantized_attention(a);
  topk_run t;
  t.run(probs, f.len(), f.len(), f.heads, f.kv_heads, 16, f.len() - 1);
  for (std::int64_t g = 0; g < f.kv_heads; ++g)
    EXPECT_EQ(std::vector<std::int64_t>(t.pos.begin() + g * 16, t.pos.begin() + (g + 1) * 16),
              brute(probs, f.len(), f.len(), f.heads, f.kv_heads, g, 16, f.len() - 1));
}

TEST(TopK, RejectsBadShapes) {
  std::vector<float> probs(12);
  topk_run t;
  EXPECT_THROW(t.run(probs, 6, 6, 3, 2, 2, -1), std::invalid_argument);
  EXPECT_THROW(t.run(probs, 5, 6, 2, 1, 2, -1), std::invalid_argument);
}

}  // namespace
}  // namespace specpipe
