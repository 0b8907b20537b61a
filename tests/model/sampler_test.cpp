#include "model/sampler.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "support/test_util.hpp"

namespace specpipe {
namespace {

std::vector<float> random_logits(std::uint64_t seed, std::size_t n) {
  std::mt19937_64 rng(seed);
  return test::random_floats(rng, n, -5.0f, 5.0f);
}

std::size_t argmax_of(const std::vector<float>& x) {
  return std::size_t(std::max_element(x.begin(), x.end()) - x.begin());
}

TEST(sampler, temperature_zero_is_argmax) {
  sampling_params p;
  p.temperature = 0.0f;
  sampler s(p);
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    const auto l = random_logits(test::default_seed + seed, 257);
    EXPECT_EQ(std::size_t(s.sample(l)), argmax_of(l)) << test::seed_trace(test::default_seed + seed);
  }
}

TEST(sampler, top_k_one_is_argmax_at_any_temperature) {
  sampling_params p;
  p.temperature = 5.0f;
  p.top_k = 1;
  p.seed = 7;
  sampler s(p);
  const auto l = random_logits(test::default_seed, 1000);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(std::size_t(s.sample(l)), argmax_of(l));
}

TEST(sampler, same_seed_same_tokens_other_seed_differs) {
  sampling_params p;
  p.temperature = 1.5f;
  p.seed = 1234;
  const auto l = random_logits(test::default_seed, 500);
  sampler a(p), b(p);
  p.seed = 1235;
  sampler c(p);
  int differ = 0;
  for (int i = 0; i < 100; ++i) {
    const auto x = a.sample(l);
    ASSERT_EQ(x, b.sample(l)) << "draw " << i;
    differ += x != c.sample(l);
  }
  EXPECT_GT(differ, 10);
}

TEST(sampler, draws_follow_softmax_with_temperature) {
  // Four tokens with logits log(1), log(2), log(3), log(4) at T = 1: p = k/10.
  sampling_params p;
  p.temperature = 1.0f;
  p.seed = 99;
  sampler s(p);
  const std::vector<float> l = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  std::vector<int> counts(4);
  const int draws = 40000;
  for (int i = 0; i < draws; ++i) counts[std::size_t(s.sample(l))]++;
  for (int k = 0; k < 4; ++k) {
    const double expected = (k + 1) / 10.0;
    // 5 standard deviations of a binomial proportion.
    EXPECT_NEAR(counts[std::size_t(k)] / double(draws), expected,
                5 * std::sqrt(expected * (1 - expected) / draws)) << "token " << k;
  }
}

TEST(sampler, top_p_keeps_only_the_nucleus) {
  // p = 0.5, 0.25, 0.15, 0.1 at T = 1. top_p = 0.7: 0.5 < 0.7, 0.75 >= 0.7, so
  // tokens 0 and 1 form the nucleus, renormalized to 2/3 and 1/3.
  sampling_params p;
  p.temperature = 1.0f;
  p.top_p = 0.7f;
  p.seed = 5;
  sampler s(p);
  const std::vector<float> l = {std::log(0.15f), std::log(0.5f), std::log(0.1f), std::log(0.25f)};
  std::map<int, int> counts;
  const int draws = 30000;
  for (int i = 0; i < draws; ++i) counts[s.sample(l)]++;
  EXPECT_EQ(counts.size(), 2u) << "tokens outside the nucleus were drawn";
  EXPECT_EQ(counts.count(0) + counts.count(2), 0u);
  const double share = counts[1] / double(draws);
  EXPECT_NEAR(share, 2.0 / 3.0, 5 * std::sqrt((2.0 / 9.0) / draws));
}

TEST(sampler, top_k_restricts_support) {
  sampling_params p;
  p.temperature = 2.0f;
  p.top_k = 3;
  p.seed = 11;
  sampler s(p);
  const std::vector<float> l = {0.1f, 2.0f, -1.0f, 1.5f, 1.9f, 0.0f};
  std::map<int, int> counts;
  for (int i = 0; i < 5000; ++i) counts[s.sample(l)]++;
  EXPECT_EQ(counts.size(), 3u);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[3], 0);
  EXPECT_GT(counts[4], 0);
}

TEST(sampling_params, validation_names_the_field) {
  auto expect_error = [](sampling_params p, const std::string& field) {
    try {
      p.validate();
      ADD_FAILURE() << "no exception for " << field;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
    EXPECT_THROW(sampler{p}, std::invalid_argument);
  };
  sampling_params p;
  p.validate();
  p.temperature = -0.1f;
  expect_error(p, "temperature");
  p.temperature = std::nanf("");
  expect_error(p, "temperature");
  p = {};
  p.top_p = 0.0f;
  expect_error(p, "top_p");
  p.top_p = 1.01f;
  expect_error(p, "top_p");
  p.top_p = std::nanf("");
  expect_error(p, "top_p");
  p = {};
  p.top_k = -1;
  expect_error(p, "top_k");
  p = {};
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.validate();
}

TEST(sampler, rejects_empty_and_nan_logits) {
  sampler s(sampling_params{});
  EXPECT_THROW(s.sample({}), std::invalid_argument);
  const std::vector<float> l = {1.0f, std::nanf("")};
  EXPECT_THROW(s.sample(l), std::invalid_argument);
}

}  // namespace
}  // namespace specpipe
