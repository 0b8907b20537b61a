#include "kernels/rope.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "support/test_util.hpp"

namespace specpipe::kernels::cpu {
namespace {

using test::all_close;

TEST(rope_inv_freq, default_is_theta_power_law) {
  for (std::int64_t d : {16, 64, 128}) {
    rope_params p;
    p.theta = 500000.0;
    std::vector<float> f(std::size_t(d / 2));
    rope_inv_freq(p, d, f.data());
    for (std::int64_t i = 0; i < d / 2; ++i)
      EXPECT_NEAR(f[std::size_t(i)], 1.0 / std::pow(500000.0, double(2 * i) / double(d)),
                  2e-6 * f[std::size_t(i)]) << "dim " << d << " i " << i;
  }
}

TEST(rope_inv_freq, linear_divides_by_factor) {
  rope_params p;
  p.scaling = 1;
  p.factor = 4.0;
  std::vector<float> base(32), scaled(32);
  rope_inv_freq(rope_params{}, 64, base.data());
  rope_inv_freq(p, 64, scaled.data());
  for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(scaled[std::size_t(i)], base[std::size_t(i)] / 4.0f);
}

TEST(rope_inv_freq, llama3_bands_follow_hf_formula) {
  // Llama-3.1-8B's rope_scaling.
  rope_params p;
  p.theta = 500000.0;
  p.scaling = 2;
  p.factor = 8.0;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;
  p.original_max_position_embeddings = 8192;
  std::vector<float> base(64), got(64);
  rope_inv_freq(rope_params{500000.0}, 128, base.data());
  rope_inv_freq(p, 128, got.data());
  int low = 0, mid = 0, high = 0;
  for (int i = 0; i < 64; ++i) {
    const double f = base[std::size_t(i)];
    const double wavelen = 2 * std::numbers::pi / f;
    double want;
    if (wavelen < 8192.0 / 4.0) {
      want = f, ++high;
    } else if (wavelen > 8192.0) {
      want = f / 8.0, ++low;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      want = (1 - smooth) * f / 8.0 + smooth * f, ++mid;
    }
    EXPECT_NEAR(got[std::size_t(i)], want, 1e-5 * want) << "i " << i;
  }
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
  EXPECT_GT(high, 0);
}

TEST(rope_inv_freq, rejects_odd_head_dim) {
  float f[4];
  EXPECT_THROW(rope_inv_freq(rope_params{}, 7, f), std::invalid_argument);
}

TEST(rope_apply, matches_rotate_half_reference) {
  for (std::int64_t d : {16, 64, 128}) {
    const std::uint64_t seed = test::default_seed + std::uint64_t(d);
    SCOPED_TRACE(test::seed_trace(seed) + " head_dim " + std::to_string(d));
    std::mt19937_64 rng(seed);
    const std::int64_t n = 5, heads = 3, half = d / 2, stride = heads * d + 4;
    std::vector<float> inv(static_cast<std::size_t>(half));
    rope_inv_freq(rope_params{}, d, inv.data());
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
  rope_inv_freq(rope_params{}, 16, inv.data());
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
