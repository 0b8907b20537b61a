// Attention straight over packed codes equals exact attention over the
// dequantized copy (built in the test only), for every format and read,
// with GQA, head_dim 80, causal multi-query blocks and a full-precision window.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/quant_packed_fixture.hpp"
#include "kernels/quantized_attention.hpp"

namespace specpipe {
namespace {

namespace kc = kernels::cpu;

struct attn_case {
  const char* name;
  kc::quant_rule rule;
  int bits;
  bool read_lower;
  std::int64_t group;
};

class QuantizedAttention : public ::testing::TestWithParam<attn_case> {};

std::vector<float> exact(const test::packed_fixture& f, const std::vector<float>& q, std::int64_t n, std::int64_t pos0) {
  std::vector<float> dk, dv;
  f.dequantized(dk, dv);
  return test::full_attention(f, dk, dv, q, n, pos0);
}

TEST_P(QuantizedAttention, EqualsAttentionOverTheDequantizedCache) {
  const auto p = GetParam();
  const std::uint64_t seed = test::default_seed + std::uint64_t(p.bits) * 31 + std::uint64_t(p.group);
  SCOPED_TRACE(test::seed_trace(seed));
  test::packed_fixture f;
  f.rule = p.rule;
  f.bits = p.bits;
  f.read_lower = p.read_lower;
  f.group = p.group;
  f.build(seed);
  kc::thread_pool pool(2);
  std::mt19937_64 rng(seed + 1);
  // Query blocks: the window's end, inside a packed group (causal cut), the first position.
  const std::int64_t blocks[][2] = {{4, f.len() - 4}, {3, f.group + 5}, {1, 0}, {f.len(), 0}};
  for (const auto& b : blocks) {
    const std::int64_t n = b[0], pos0 = b[1];
    SCOPED_TRACE("n " + std::to_string(n) + " pos0 " + std::to_string(pos0));
    const auto q = test::random_floats(rng, std::size_t(n * f.heads * f.d), -1.0f, 1.0f, 0.02);
    const auto ref = exact(f, q, n, pos0);
    test::poisoned_output out(ref.size());
    std::vector<float> probs(std::size_t(n * f.heads * f.len()), -1.0f);
    auto a = f.args(q.data(), n, pos0, out.data());
    a.probs = probs.data();
    a.probs_stride = f.len();
    kc::quantized_attention(a, &pool);
    ASSERT_TRUE(out.check_sentinels());
    for (std::size_t i = 0; i < ref.size(); ++i)
      ASSERT_NEAR(out.data()[i], ref[i], 1e-5 + 1e-5 * std::abs(ref[i])) << "element " << i;
    // Each (query, head) row of probabilities sums to 1 over its causal span
    // and leaves the positions after it untouched.
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t h = 0; h < f.heads; ++h) {
        const float* pr = probs.data() + (i * f.heads + h) * f.len();
        double s = 0;
        for (std::int64_t j = 0; j <= pos0 + i; ++j) s += pr[j];
        ASSERT_NEAR(s, 1.0, 1e-5);
        for (std::int64_t j = pos0 + i + 1; j < f.len(); ++j) ASSERT_EQ(pr[j], -1.0f);
      }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, QuantizedAttention,
    ::testing::Values(attn_case{"kivi1", kc::quant_rule::rtn, 1, false, 32}, attn_case{"kivi2", kc::quant_rule::rtn, 2, false, 32},
                      attn_case{"kivi4", kc::quant_rule::rtn, 4, false, 32}, attn_case{"kivi2_G64", kc::quant_rule::rtn, 2, false, 64},
                      attn_case{"kivi4_G128", kc::quant_rule::rtn, 4, false, 128},
                      attn_case{"specache1", kc::quant_rule::specache, 1, false, 32},
                      attn_case{"hier_int4", kc::quant_rule::hier, 4, false, 32},
                      attn_case{"hier_int8", kc::quant_rule::hier, 4, true, 32},
                      attn_case{"hier_int8_G128", kc::quant_rule::hier, 4, true, 128}),
    [](const auto& i) { return std::string(i.param.name); });

TEST(QuantizedAttention, Int8ReadIsCloserToTheOriginalThanInt4) {
  test::packed_fixture f;
  f.rule = kc::quant_rule::hier;
  f.bits = 4;
  f.build(test::default_seed);
  std::vector<float> k4, v4, k8, v8;
  f.dequantized(k4, v4);
  f.read_lower = true;
  f.dequantized(k8, v8);
  double e4 = 0, e8 = 0;
  for (std::size_t i = 0; i < f.k.size(); ++i) {
    e4 += std::abs(k4[i] - f.k[i]);
    e8 += std::abs(k8[i] - f.k[i]);
  }
  EXPECT_LT(e8 * 8, e4) << "INT8 mean error " << e8 << " vs INT4 " << e4;
}

TEST(QuantizedAttention, RejectsMissingPositions) {
  test::packed_fixture f;
  f.build(test::default_seed);
  std::vector<float> q(std::size_t(f.heads * f.d)), out(q.size());
  auto a = f.args(q.data(), 1, f.len(), out.data());
  EXPECT_THROW(kc::quantized_attention(a), std::invalid_argument);
  a = f.args(q.data(), 1, 0, out.data());
  a.kv.n_tokens = f.group + 1;
  EXPECT_THROW(kc::quantized_attention(a), std::invalid_argument);
}

}  // namespace
}  // namespace specpipe
