#include "kernels/linear.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <tuple>

#include "kernels/cpu/thread_pool.hpp"
#include "support/test_util.hpp"

namespace specpipe::kernels::cpu {
namespace {

using test::all_close;
using test::poisoned_output;

// A weight matrix stored in `type`, plus its exact f32 values for the reference.
struct weight_matrix {
  std::vector<float> f32;             // values as stored (after rounding)
  std::vector<std::uint16_t> halves;  // codes when type is f16/bf16
  dtype type;
  const void* data() const {
    return type == dtype::f32 ? static_cast<const void*>(f32.data())
                              : static_cast<const void*>(halves.data());
  }
};

weight_matrix make_weights(std::mt19937_64& rng, std::size_t count, dtype t) {
  weight_matrix w{test::random_floats(rng, count, -1.0f, 1.0f, 0.01), {}, t};
  if (t != dtype::f32) {
    w.halves = test::to_half_codes(w.f32, t);
    w.f32 = test::from_half_codes(w.halves, t);
  }
  return w;
}

// y[t, o] = sum_i x[t, i] * w[o, i] in double.
std::vector<double> reference(const std::vector<float>& x, std::int64_t x_stride,
                              const std::vector<float>& w, std::int64_t w_stride, std::int64_t n,
                              std::int64_t in, std::int64_t out) {
  std::vector<double> y(std::size_t(n * out));
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (std::int64_t i = 0; i < in; ++i)
        s += double(x[std::size_t(t * x_stride + i)]) * double(w[std::size_t(o * w_stride + i)]);
      y[std::size_t(t * out + o)] = s;
    }
  return y;
}

class linear_shapes
    : public ::testing::TestWithParam<std::tuple<dtype, std::int64_t, std::int64_t, std::int64_t, int>> {};

TEST_P(linear_shapes, matches_double_reference) {
  const auto [type, n, in, out, threads] = GetParam();
  const std::uint64_t seed = test::default_seed + std::uint64_t(n * 131 + in * 7 + out);
  SCOPED_TRACE(test::seed_trace(seed));
  std::mt19937_64 rng(seed);
  // Padded strides on x and W exercise the stride arguments.
  const std::int64_t x_stride = in + 3, w_stride = in + 5;
  const auto x = test::random_floats(rng, std::size_t(n * x_stride), -1.0f, 1.0f, 0.01);
  const auto w = make_weights(rng, std::size_t(out * w_stride), type);
  const auto ref = reference(x, x_stride, w.f32, w_stride, n, in, out);

  thread_pool pool(threads);
  poisoned_output y(std::size_t(n * out));
  linear_args a;
  a.x = x.data();
  a.x_stride = x_stride;
  a.w = w.data();
  a.w_type = type;
  a.w_stride = w_stride;
  a.y = y.data();
  a.n = n;
  a.in = in;
  a.out = out;
  linear(a, &pool);
  // f32 accumulation over `in` terms of magnitude <= 64: error grows ~ sqrt(in) eps.
  EXPECT_TRUE(all_close(y.data(), ref.data(), y.size(), 2e-5 * std::sqrt(double(in)), 1e-5));
  EXPECT_TRUE(y.check_sentinels());

  // Each token's row equals the single-token (decode) result bit for bit.
  for (std::int64_t t = 0; t < n; ++t) {
    poisoned_output row{std::size_t(out)};
    linear_args one = a;
    one.x = x.data() + t * x_stride;
    one.y = row.data();
    one.n = 1;
    linear(one, nullptr);
    ASSERT_EQ(std::memcmp(row.data(), y.data() + t * out, std::size_t(out) * 4), 0) << "token " << t;
    ASSERT_TRUE(row.check_sentinels());
  }
}

INSTANTIATE_TEST_SUITE_P(
    odd_sizes, linear_shapes,
    ::testing::Combine(::testing::Values(dtype::f32, dtype::f16, dtype::bf16),
                       ::testing::Values<std::int64_t>(1, 2, 3, 4, 9, 17),
                       ::testing::Values<std::int64_t>(67, 1030),
                       ::testing::Values<std::int64_t>(33, 1), ::testing::Values(1, 3)));

TEST(linear, output_stride_leaves_gaps_untouched) {
  std::mt19937_64 rng(test::default_seed);
  SCOPED_TRACE(test::seed_trace(test::default_seed));
  const std::int64_t n = 5, in = 40, out = 11, y_stride = 16;
  const auto x = test::random_floats(rng, std::size_t(n * in));
  const auto w = test::random_floats(rng, std::size_t(out * in));
  poisoned_output y(std::size_t(n * y_stride));
  linear_args a;
  a.x = x.data();
  a.w = w.data();
  a.y = y.data();
  a.y_stride = y_stride;
  a.n = n;
  a.in = in;
  a.out = out;
  linear(a);
  const auto ref = reference(x, in, w, in, n, in, out);
  for (std::int64_t t = 0; t < n; ++t) {
    EXPECT_TRUE(all_close(y.data() + t * y_stride, ref.data() + t * out, std::size_t(out), 1e-5, 1e-5));
    for (std::int64_t o = out; o < y_stride; ++o) EXPECT_TRUE(std::isnan(y.data()[t * y_stride + o]));
  }
}

TEST(linear, rejects_bad_arguments) {
  float x[4] = {}, y[4] = {};
  std::int8_t w[16] = {};
  linear_args a;
  a.x = x;
  a.w = w;
  a.w_type = dtype::i8;
  a.y = y;
  a.n = 1;
  a.in = 4;
  a.out = 4;
  EXPECT_THROW(linear(a), std::invalid_argument);
  a.w_type = dtype::f32;
  a.in = 0;
  EXPECT_THROW(linear(a), std::invalid_argument);
  a.in = 4;
  a.w_stride = 2;
  EXPECT_THROW(linear(a), std::invalid_argument);
}

}  // namespace
}  // namespace specpipe::kernels::cpu
