#include "kernels/norm.hpp"

#include <gtest/gtest.h>

#include "support/test_util.hpp"

namespace specpipe::kernels::cpu {
namespace {

using test::all_close;
using test::poisoned_output;

std::vector<double> reference(const std::vector<float>& x, std::int64_t n, std::int64_t dim,
                              const std::vector<float>& w, double eps) {
  std::vector<double> y(x.size());
  for (std::int64_t t = 0; t < n; ++t) {
    double ss = 0;
    for (std::int64_t i = 0; i < dim; ++i) ss += double(x[std::size_t(t * dim + i)]) * x[std::size_t(t * dim + i)];
    const double inv = 1.0 / std::sqrt(ss / double(dim) + eps);
    for (std::int64_t i = 0; i < dim; ++i)
      y[std::size_t(t * dim + i)] = double(w[std::size_t(i)]) * x[std::size_t(t * dim + i)] * inv;
  }
  return y;
}

class norm_dtypes : public ::testing::TestWithParam<dtype> {};

TEST_P(norm_dtypes, rms_norm_matches_reference) {
  const dtype type = GetParam();
  for (std::int64_t dim : {1, 7, 64, 67, 4096}) {
    const std::uint64_t seed = test::default_seed + std::uint64_t(dim);
    SCOPED_TRACE(test::seed_trace(seed) + " dim " + std::to_string(dim));
    std::mt19937_64 rng(seed);
    const std::int64_t n = 3;
    const auto x = test::random_floats(rng, std::size_t(n * dim), -2.0f, 2.0f, 0.02);
    auto w = test::random_floats(rng, std::size_t(dim), 0.5f, 1.5f);
    std::vector<std::uint16_t> codes;
    const void* wp = w.data();
    if (type != dtype::f32) {
      codes = test::to_half_codes(w, type);
      w = test::from_half_codes(codes, type);
      wp = codes.data();
    }
    const float eps = 1e-5f;
    poisoned_output y(x.size());
    rms_norm(x.data(), n, dim, wp, type, eps, y.data());
    const auto ref = reference(x, n, dim, w, eps);
    EXPECT_TRUE(all_close(y.data(), ref.data(), y.size(), 1e-6, 1e-5));
    EXPECT_TRUE(y.check_sentinels());

    // Fused residual add: same as adding first, then normalizing.
    const auto delta = test::random_floats(rng, x.size());
    std::vector<float> residual = x;
    poisoned_output y2(x.size());
    add_rms_norm(residual.data(), delta.data(), n, dim, wp, type, eps, y2.data());
    std::vector<float> sum(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + delta[i];
    EXPECT_TRUE(all_close(residual.data(), sum.data(), sum.size(), 0, 0));
    const auto ref2 = reference(sum, n, dim, w, eps);
    EXPECT_TRUE(all_close(y2.data(), ref2.data(), y2.size(), 1e-6, 1e-5));
    EXPECT_TRUE(y2.check_sentinels());
  }
}

INSTANTIATE_TEST_SUITE_P(weights, norm_dtypes,
                         ::testing::Values(dtype::f32, dtype::f16, dtype::bf16));

TEST(rms_norm, eps_dominates_for_zero_input_and_output_aliases_input) {
  std::vector<float> x(16, 0.0f), w(16, 1.0f);
  rms_norm(x.data(), 1, 16, w.data(), dtype::f32, 1e-6f, x.data());
  for (float v : x) EXPECT_EQ(v, 0.0f);
  std::vector<float> x2 = {3.0f, 4.0f};  // mean square 12.5
  std::vector<float> w2 = {1.0f, 2.0f};
  rms_norm(x2.data(), 1, 2, w2.data(), dtype::f32, 0.0f, x2.data());
  EXPECT_NEAR(x2[0], 3.0 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(x2[1], 8.0 / std::sqrt(12.5), 1e-6);
}

}  // namespace
}  // namespace specpipe::kernels::cpu
