// Scalar conversions against exact references: every f16 code decodes to the
// value its bits define, and f32 -> f16/bf16 rounds to nearest even exactly
// where a double-precision reference says.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "memory/dtype.hpp"

namespace specpipe {
namespace {

// The value an IEEE half code denotes, computed from its fields in double.
double half_value(std::uint16_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(double(mant), -24);
  else if (exp == 31) v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else v = std::ldexp(1.0 + mant / 1024.0, exp - 15);
  return sign ? -v : v;
}

TEST(Dtype, EveryHalfCodeDecodesExactly) {
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const double want = half_value(std::uint16_t(c));
    const float got = f16_to_f32(std::uint16_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(double(got), want) << "code " << c;
    }
  }
}

// Nearest-even rounding to the half grid, by brute force over neighbours.
std::uint16_t reference_f16(float f) {
  if (std::isnan(f)) return 0x7e00;
  std::uint16_t best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  if (a >= 65520.0) return sign | 0x7c00;  // halfway to 2^16 and beyond: infinity
  for (std::uint32_t c = 0; c < 0x7c00; ++c) {
    const double err = std::fabs(half_value(std::uint16_t(c)) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = std::uint16_t(c);
      best_err = err;
    }
  }
  return sign | best;
}

TEST(Dtype, F32ToF16RoundsToNearestEven) {
  std::mt19937_64 rng(7);
  std::vector<float> probes = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 5.96e-8f,
                               2.98e-8f, 2.99e-8f, 6.1e-5f, -3.14159f, 1.0f + 1.0f / 2048.0f,
                               1.0f + 3.0f / 2048.0f, std::numeric_limits<float>::infinity()};
  std::uniform_int_distribution<std::uint32_t> bits(0, 0x477fffffu);
  for (int i = 0; i < 300; ++i) probes.push_back(bits_to_f32(bits(rng)));
  for (float f : probes) EXPECT_EQ(f32_to_f16(f), reference_f16(f)) << "value " << f;
  EXPECT_EQ(f32_to_f16(std::nanf("")) & 0x7c00, 0x7c00);
  EXPECT_NE(f32_to_f16(std::nanf("")) & 0x3ff, 0);
}

TEST(Dtype, Bf16RoundTripAndTies) {
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const float f = bf16_to_f32(std::uint16_t(c));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_bf16(f), c) << c;  // exact values survive
  }
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even code.
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256.0f), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST(Dtype, NamesAndSizes) {
  EXPECT_EQ(dtype_from_name("BF16"), dtype::bf16);
  EXPECT_EQ(dtype_from_name("float16"), dtype::f16);
  EXPECT_EQ(dtype_from_name("F32"), dtype::f32);
  EXPECT_EQ(dtype_from_name("I32"), dtype::i32);
  EXPECT_FALSE(dtype_from_name("F64").has_value());
  EXPECT_EQ(dtype_size(dtype::bf16), 2u);
  EXPECT_EQ(dtype_size(dtype::i32), 4u);
  EXPECT_EQ(dtype_name(dtype::u8), "u8");
}

}  // namespace
}  // namespace specpipe
