#include "kernels/sampling.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "support/test_util.hpp"

namespace specpipe::kernels::cpu {
namespace {

TEST(argmax, first_maximum_and_nan_skipped) {
  const std::vector<float> x = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  EXPECT_EQ(argmax(x.data(), 5), 1);
  const std::vector<float> y = {std::nanf(""), -1.0f, std::nanf(""), 2.0f};
  EXPECT_EQ(argmax(y.data(), 4), 3);
  const float only_nan = std::nanf("");
  EXPECT_EQ(argmax(&only_nan, 1), -1);
  EXPECT_EQ(argmax(x.data(), 0), -1);
}

TEST(softmax, matches_double_reference_with_temperature) {
  std::mt19937_64 rng(test::default_seed);
  SCOPED_TRACE(test::seed_trace(test::default_seed));
  auto logits = test::random_floats(rng, 1003, -20.0f, 20.0f);
  logits[7] = -INFINITY;
  for (float t : {0.25f, 1.0f, 3.0f}) {
    test::poisoned_output p(logits.size());
    softmax(logits.data(), std::int64_t(logits.size()), t, p.data());
    double mx = -INFINITY, z = 0;
    for (float l : logits) mx = std::max(mx, double(l));
    std::vector<double> ref(logits.size());
    for (std::size_t i = 0; i < logits.size(); ++i) z += ref[i] = std::exp((logits[i] - mx) / t);
    for (auto& r : ref) r /= z;
    EXPECT_TRUE(test::all_close(p.data(), ref.data(), ref.size(), 1e-9, 1e-5)) << "T " << t;
    EXPECT_EQ(p.data()[7], 0.0f);
    EXPECT_TRUE(p.check_sentinels());
  }
}

TEST(softmax, tiny_temperature_approaches_one_hot) {
  const std::vector<float> l = {1.0f, 3.0f, 2.0f};
  std::vector<float> p(3);
  softmax(l.data(), 3, 1e-30f, p.data());
  EXPECT_EQ(p, (std::vector<float>{0.0f, 1.0f, 0.0f}));
}

TEST(top_k_filter, keeps_k_largest_and_ties_at_the_threshold) {
  std::vector<float> x = {0.1f, 5.0f, 3.0f, 3.0f, -1.0f, 4.0f};
  std::vector<float> scratch(x.size());
  auto y = x;
  EXPECT_EQ(top_k_filter(y.data(), 6, 2, scratch.data()), 2);
  EXPECT_EQ(y, (std::vector<float>{-INFINITY, 5.0f, -INFINITY, -INFINITY, -INFINITY, 4.0f}));
  y = x;
  EXPECT_EQ(top_k_filter(y.data(), 6, 3, scratch.data()), 4);  // both 3.0 survive
  EXPECT_EQ(y[2], 3.0f);
  EXPECT_EQ(y[3], 3.0f);
  EXPECT_EQ(y[0], -INFINITY);
  y = x;
  EXPECT_EQ(top_k_filter(y.data(), 6, 0, scratch.data()), 6);
  EXPECT_EQ(top_k_filter(y.data(), 6, 6, scratch.data()), 6);
  EXPECT_EQ(y, x);
}

TEST(top_p_filter, keeps_smallest_prefix_reaching_p_and_renormalizes) {
  std::vector<std::int32_t> order(5);
  // Sorted: 0.4 (idx 2), 0.3 (idx 0), 0.2 (idx 4), 0.1 (idx 1), 0.0 (idx 3).
  const std::vector<float> p = {0.3f, 0.1f, 0.4f, 0.0f, 0.2f};
  auto q = p;
  EXPECT_EQ(top_p_filter(q.data(), 5, 0.6f, order.data()), 2);  // 0.4 < 0.6, 0.4+0.3 crosses
  EXPECT_NEAR(q[2], 0.4 / 0.7, 1e-6);
  EXPECT_NEAR(q[0], 0.3 / 0.7, 1e-6);
  EXPECT_EQ(q[1], 0.0f);
  EXPECT_EQ(q[4], 0.0f);
  q = p;
  EXPECT_EQ(top_p_filter(q.data(), 5, 0.1f, order.data()), 1);  // the top token always stays
  EXPECT_NEAR(q[2], 1.0, 1e-6);
  q = p;
  EXPECT_EQ(top_p_filter(q.data(), 5, 1.0f, order.data()), 5);
  EXPECT_EQ(q, p);
}

TEST(sample_categorical, inverts_the_cumulative_distribution) {
  const std::vector<float> p = {0.0f, 0.25f, 0.0f, 0.75f};
  EXPECT_EQ(sample_categorical(p.data(), 4, 0.0), 1);
  EXPECT_EQ(sample_categorical(p.data(), 4, 0.2499), 1);
  EXPECT_EQ(sample_categorical(p.data(), 4, 0.25), 3);
  EXPECT_EQ(sample_categorical(p.data(), 4, 0.999999999), 3);
  // Unnormalized masses work the same.
  const std::vector<float> m = {2.0f, 0.0f, 6.0f};
  EXPECT_EQ(sample_categorical(m.data(), 3, 0.2), 0);
  EXPECT_EQ(sample_categorical(m.data(), 3, 0.3), 2);
}

}  // namespace
}  // namespace specpipe::kernels::cpu
