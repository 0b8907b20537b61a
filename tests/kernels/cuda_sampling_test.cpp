// GPU argmax and sampled selection: exact argmax (ties to the lowest id),
// top-k / top-p sets respected, and frequencies that follow the softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tests/kernels/cuda_test_util.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/sampling.hpp"
#endif

namespace specpipe::test {
namespace {

class cuda_sampling : public cuda_test {};

#ifdef SPECPIPE_HAVE_CUDA
namespace kc = kernels::cuda;

TEST_F(cuda_sampling, argmax_rows_picks_the_first_maximum) {
  std::mt19937 rng(7);
  const std::int64_t rows = 4, vocab = 128256, ld = vocab + 5;
  auto x = random_values(rng, std::size_t(rows * ld), 20.f);
  x[std::size_t(0 * ld + 77)] = 100.f;
  x[std::size_t(0 * ld + 99999)] = 100.f;  // tie: 77 wins
  x[std::size_t(1 * ld + vocab - 1)] = 50.f;
  x[std::size_t(2 * ld + 0)] = 60.f;
  x[std::size_t(3 * ld + 5)] = NAN;  // NaN never wins
  dev_array<float> dx(*dev_, x);
  dev_array<std::int32_t> out(*dev_, std::size_t(rows));
  kc::argmax_rows(dx.get(), ld, rows, vocab, out.get(), nullptr);
  const auto got = out.download();
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int32_t best = -1;
    for (std::int64_t i = 0; i < vocab; ++i) {
      const float v = x[std::size_t(r * ld + i)];
      if (!std::isnan(v) && (best < 0 || v > x[std::size_t(r * ld + best)])) best = std::int32_t(i);
    }
    EXPECT_EQ(got[std::size_t(r)], best) << "row " << r;
  }
  EXPECT_TRUE(out.sentinel_intact());
}

TEST_F(cuda_sampling, top_k_one_and_frequencies) {
  const std::int64_t vocab = 50, rows = 20000;
  std::mt19937 rng(8);
  auto one = random_values(rng, std::size_t(vocab), 3.f);
  std::vector<float> x;
  for (std::int64_t r = 0; r < rows; ++r) x.insert(x.end(), one.begin(), one.end());
  dev_array<float> dx(*dev_, x);
  dev_array<std::int32_t> out(*dev_, std::size_t(rows));
  const auto best = std::int32_t(std::max_element(one.begin(), one.end()) - one.begin());

  kc::sample_rows(dx.get(), vocab, rows, vocab, {1.0f, 1, 1.0f, 3, 0}, out.get(), nullptr);
  for (auto id : out.download()) ASSERT_EQ(id, best);

  const float temp = 0.7f;
  kc::sample_rows(dx.get(), vocab, rows, vocab, {temp, 0, 1.0f, 4, 1000}, out.get(), nullptr);
  std::vector<double> p(static_cast<std::size_t>(vocab));
  const double mx = *std::max_element(one.begin(), one.end());
  double z = 0;
  for (std::int64_t i = 0; i < vocab; ++i) z += (p[std::size_t(i)] = std::exp((one[std::size_t(i)] - mx) / temp));
  std::vector<int> hist(std::size_t(vocab), 0);
  for (auto id : out.download()) {
    ASSERT_TRUE(id >= 0 && id < vocab);
    ++hist[std::size_t(id)];
  }
  for (std::int64_t i = 0; i < vocab; ++i) {
    const double e = p[std::size_t(i)] / z * double(rows);
    // 5 standard deviations of a binomial count, plus slack for tiny counts.
    EXPECT_NEAR(hist[std::size_t(i)], e, 5 * std::sqrt(e) + 3) << "token " << i;
  }
  // Same seed and counter: the same draws.
  const auto first = out.download();
  kc::sample_rows(dx.get(), vocab, rows, vocab, {temp, 0, 1.0f, 4, 1000}, out.get(), nullptr);
  EXPECT_EQ(out.download(), first);
  EXPECT_TRUE(out.sentinel_intact());
}

TEST_F(cuda_sampling, top_k_and_top_p_sets_are_respected) {
  const std::int64_t vocab = 32000, rows = 512;
  std::mt19937 rng(10);
  auto one = random_values(rng, std::size_t(vocab), 12.f);
  std::vector<float> x;
  for (std::int64_t r = 0; r < rows; ++r) x.insert(x.end(), one.begin(), one.end());
  dev_array<float> dx(*dev_, x);
  dev_array<std::int32_t> out(*dev_, std::size_t(rows));
  std::vector<std::int32_t> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return one[std::size_t(a)] > one[std::size_t(b)]; });

  kc::sample_rows(dx.get(), vocab, rows, vocab, {1.0f, 40, 1.0f, 5, 0}, out.get(), nullptr);
  const float kth = one[std::size_t(order[39])];
  for (auto id : out.download()) ASSERT_GE(one[std::size_t(id)], kth) << "token outside the top 40";

  const float temp = 1.5f, top_p = 0.6f;
  kc::sample_rows(dx.get(), vocab, rows, vocab, {temp, 0, top_p, 6, 0}, out.get(), nullptr);
  // The nucleus: most likely tokens until their mass reaches top_p.
  double z = 0;
  for (float v : one) z += std::exp((v - one[std::size_t(order[0])]) / temp);
  double mass = 0;
  std::size_t keep = 0;
  while (keep < order.size() && mass < top_p * z * (1 - 1e-4))
    mass += std::exp((one[std::size_t(order[keep++])] - one[std::size_t(order[0])]) / temp);
  const float floor_v = one[std::size_t(order[std::min(keep + 1, order.size() - 1)])];
  for (auto id : out.download()) ASSERT_GE(one[std::size_t(id)], floor_v) << "token outside the nucleus";
}

TEST_F(cuda_sampling, bad_parameters_are_rejected) {
  EXPECT_THROW(kc::sample_rows(nullptr, 10, 1, 10, {0.f, 0, 1.f, 0, 0}, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(kc::sample_rows(nullptr, 10, 1, 10, {1.f, 0, 0.f, 0, 0}, nullptr, nullptr), std::invalid_argument);
}
#else
TEST_F(cuda_sampling, skipped_without_cuda) {}
#endif

}  // namespace
}  // namespace specpipe::test
