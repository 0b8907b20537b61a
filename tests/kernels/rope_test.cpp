#include "kernels/rope.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "support/test_util.hpp"

namespace specpipe::kernels::cpu {
namespace {

using test::all_close;

// HF's default table, 1 / 10000^(2i/d) in f32 (scaled tables are tested with
// the config, tests/model/config_test.cpp).
std::vector<float> theta_inv_freq(std::int64_t d) {
  std::vector<float> f(std::size_t(d / 2));
  for (std::int64_t i = 0; i < d / 2; ++i) f[std::size_t(i)] = 1.0f / std::pow(10000.0f, float(2 * i) / float(d));
  return f;
}

TEST(rope_apply, matches_rotate_half_reference) {
  for (std::int64_t d : {16, 64, 128}) {
    const std::uint64_t seed = test::default_seed + std::uint64_t(d);
    SCOPED_TRACE(test::seed_trace(seed) + " head_dim " + std::to_string(d));
    std::mt19937_64 rng(seed);
    const std::int64_t n = 5, heads = 3, half = d / 2, stride = heads * d + 4;
    std::vector<float> inv(static_cast<std::size_t>(half));
    inv = theta_inv_freq(d);
    const std::vector<std::int64_t> pos = {0, 1, 17, 4095, 131071};
    std::vector<float> c(std::size_t(n * half)), s(std::size_t(n * half));
    rope_cos_sin(pos.data(), n, inv.data(), half, c.data(), s.data());
    auto x = test::random_floats(rng, std::size_t(n * stride));
    const auto x0 = x;
    rope_apply(x.data(), n, heads, d, stride, c.data(), s.data());
    std::vector<double> ref(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) ref[i] = x0[i];
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t i = 0; i < half; ++i) {
          // The angle as HF forms it (f32 product), then cos/sin in double.
          const double ang = double(float(pos[std::size_t(t)]) * inv[std::size_t(i)]);
          const std::size_t a = std::size_t(t * stride + h * d + i), b = a + std::size_t(half);
          ref[a] = x0[a] * std::cos(ang) - x0[b] * std::sin(ang);
          ref[b] = x0[b] * std::cos(ang) + x0[a] * std::sin(ang);
        }
    // Padding between tokens is left alone (ref copies x0 there).
    EXPECT_TRUE(all_close(x.data(), ref.data(), x.size(), 1e-6, 1e-6));
  }
}

TEST(rope_apply, position_zero_is_identity) {
  std::vector<float> inv(8);
  inv = theta_inv_freq(16);
  const std::int64_t pos = 0;
  std::vector<float> c(8), s(8);
  rope_cos_sin(&pos, 1, inv.data(), 8, c.data(), s.data());
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[std::size_t(i)] = float(i) - 7.5f;
  const auto x0 = x;
  rope_apply(x.data(), 1, 1, 16, 16, c.data(), s.data());
  EXPECT_EQ(x, x0);
}

}  // namespace
}  // namespace specpipe::kernels::cpu
