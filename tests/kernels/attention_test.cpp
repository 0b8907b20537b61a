#include "kernels/attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "kernels/cpu/thread_pool.hpp"
#include "support/test_util.hpp"

namespace specpipe::kernels::cpu {
namespace {

using test::all_close;
using test::poisoned_output;

// Materialized softmax in double: the textbook definition.
std::vector<double> reference(const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, std::int64_t n, std::int64_t pos0,
                              std::int64_t heads, std::int64_t kv_heads, std::int64_t d) {
  std::vector<double> out(std::size_t(n * heads * d));
  const std::int64_t rep = heads / kv_heads;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t g = h / rep, last = pos0 + i;
      std::vector<double> s(std::size_t(last + 1));
      double mx = -INFINITY;
      for (std::int64_t j = 0; j <= last; ++j) {
        double dot = 0;
        for (std::int64_t e = 0; e < d; ++e)
          dot += double(q[std::size_t((i * heads + h) * d + e)]) * k[std::size_t((j * kv_heads + g) * d + e)];
        s[std::size_t(j)] = dot / std::sqrt(double(d));
        mx = std::max(mx, s[std::size_t(j)]);
      }
      double z = 0;
      for (auto& x : s) z += (x = std::exp(x - mx));
      for (std::int64_t e = 0; e < d; ++e) {
        double acc = 0;
        for (std::int64_t j = 0; j <= last; ++j)
          acc += s[std::size_t(j)] * v[std::size_t((j * kv_heads + g) * d + e)];
        out[std::size_t((i * heads + h) * d + e)] = acc / z;
      }
    }
  return out;
}

// (head_dim, n_heads, n_kv_heads, n queries, pos0)
class attention_shapes
    : public ::testing::TestWithParam<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t>> {};

TEST_P(attention_shapes, matches_materialized_softmax) {
  const auto [d, heads, kv_heads, n, pos0] = GetParam();
  const std::uint64_t seed = test::default_seed + std::uint64_t(d * 1000 + heads * 10 + n + pos0);
  SCOPED_TRACE(test::seed_trace(seed));
  std::mt19937_64 rng(seed);
  const std::int64_t len = pos0 + n;
  // Scaled so scores spread over several units (peaky softmax, outliers).
  const auto q = test::random_floats(rng, std::size_t(n * heads * d), -1.5f, 1.5f, 0.02);
  const auto k = test::random_floats(rng, std::size_t(len * kv_heads * d), -1.5f, 1.5f, 0.02);
  const auto v = test::random_floats(rng, std::size_t(len * kv_heads * d));
  thread_pool pool(2);
  poisoned_output out(std::size_t(n * heads * d));
  attention_args a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.len = len;
  a.out = out.data();
  a.n = n;
  a.pos0 = pos0;
  a.n_heads = heads;
  a.n_kv_heads = kv_heads;
  a.head_dim = d;
  attention(a, &pool);
  const auto ref = reference(q, k, v, n, pos0, heads, kv_heads, d);
  EXPECT_TRUE(all_close(out.data(), ref.data(), out.size(), 2e-5, 1e-4));
  EXPECT_TRUE(out.check_sentinels());
}

INSTANTIATE_TEST_SUITE_P(
    gqa, attention_shapes,
    ::testing::Values(std::make_tuple(16, 4, 4, 1, 0),     // first token: attends to itself
                      std::make_tuple(16, 8, 2, 7, 0),     // ratio 4 prefill
                      std::make_tuple(64, 8, 1, 1, 200),   // ratio 8 decode, several key blocks
                      std::make_tuple(64, 8, 8, 5, 61),    // ratio 1, queries straddle a block edge
                      std::make_tuple(128, 8, 2, 3, 129),  // ratio 4, head_dim 128
                      std::make_tuple(128, 16, 2, 70, 0),  // ratio 8, prefill longer than a block
                      std::make_tuple(24, 6, 3, 2, 5),     // head_dim not a multiple of 8
                      std::make_tuple(32, 32, 1, 11, 3))); // MQA: a group of 32, a partial tile of queries

TEST(attention, uses_only_causal_prefix_and_strided_rows) {
  // K/V rows beyond pos0 + i for query i hold huge values: a causal bug shows.
  const std::int64_t d = 16, heads = 2, kv = 1, n = 3, len = 10, kv_stride = kv * d + 8;
  std::mt19937_64 rng(test::default_seed);
  SCOPED_TRACE(test::seed_trace(test::default_seed));
  auto q = test::random_floats(rng, std::size_t(n * heads * d));
  auto k = test::random_floats(rng, std::size_t(len * kv_stride));
  auto v = test::random_floats(rng, std::size_t(len * kv_stride));
  std::vector<float> kc, vc;  // compact copies of the first n rows for the reference
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t e = 0; e < d; ++e) {
      kc.push_back(k[std::size_t(j * kv_stride + e)]);
      vc.push_back(v[std::size_t(j * kv_stride + e)]);
    }
  for (std::int64_t j = 0; j < len; ++j)
    for (std::int64_t e = 0; e < kv_stride; ++e)
      if (j >= n || e >= d) k[std::size_t(j * kv_stride + e)] = v[std::size_t(j * kv_stride + e)] = 1e6f;
  poisoned_output out(std::size_t(n * heads * d));
  attention_args a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.kv_stride = kv_stride;
  a.len = len;
  a.out = out.data();
  a.n = n;
  a.n_heads = heads;
  a.n_kv_heads = kv;
  a.head_dim = d;
  attention(a);
  const auto ref = reference(q, kc, vc, n, 0, heads, kv, d);
  EXPECT_TRUE(all_close(out.data(), ref.data(), out.size(), 1e-5, 1e-4));
  EXPECT_TRUE(out.check_sentinels());
}

TEST(attention, rejects_inconsistent_arguments) {
  std::vector<float> buf(1024);
  attention_args a;
  a.q = a.k = a.v = buf.data();
  a.out = buf.data();
  a.n = 2;
  a.pos0 = 3;
  a.len = 4;  // needs 5
  a.n_heads = 4;
  a.n_kv_heads = 2;
  a.head_dim = 8;
  EXPECT_THROW(attention(a), std::invalid_argument);
  a.len = 5;
  a.n_kv_heads = 3;
  EXPECT_THROW(attention(a), std::invalid_argument);
}

}  // namespace
}  // namespace specpipe::kernels::cpu
