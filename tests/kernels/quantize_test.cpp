// Quantize-and-pack against the reference written from the formulas: exact
// bytes for every format, strided inputs, odd head_dim, outlier channels;
// reconstruction error bounds per element.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/quant_reference.hpp"
#include "kernels/quantize.hpp"
#include "support/test_util.hpp"

namespace specpipe {
namespace {

namespace kc = kernels::cpu;
using test::ref_rule;

struct format_case {
  kc::quant_rule rule;
  ref_rule ref;
  int bits;
  std::int64_t group;
};

std::string case_name(const ::testing::TestParamInfo<format_case>& i) {
  const char* r = i.param.rule == kc::quant_rule::rtn ? "kivi" : i.param.rule == kc::quant_rule::specache ? "specache" : "hier";
  return std::string(r) + std::to_string(i.param.bits) + "_G" + std::to_string(i.param.group);
}

// tokens x head_dim rows with a row stride of d + 5, uniform [-1, 1) with
// sparse outliers, and two channels scaled by 20 (KIVI's outlier key channels).
std::vector<float> rows(std::mt19937_64& rng, std::int64_t tokens, std::int64_t d, std::int64_t stride) {
  auto x = test::random_floats(rng, std::size_t(tokens * stride), -1.0f, 1.0f, 0.02);
  for (std::int64_t t = 0; t < tokens; ++t) {
    x[std::size_t(t * stride + 3)] *= 20.0f;
    x[std::size_t(t * stride + d - 2)] = x[std::size_t(t * stride + d - 2)] * 20.0f + 5.0f;
  }
  return x;
}

class Quantize : public ::testing::TestWithParam<format_case> {};

TEST_P(Quantize, KeyGroupBytesMatchTheReference) {
  const auto p = GetParam();
  const std::uint64_t seed = test::default_seed + std::uint64_t(p.bits * 7 + p.group);
  SCOPED_TRACE(test::seed_trace(seed));
  std::mt19937_64 rng(seed);
  const std::int64_t d = 80, stride = d + 5, G = p.group, chan = G * p.bits / 8;
  const auto x = rows(rng, G, d, stride);
  const bool hier = p.rule == kc::quant_rule::hier;
  // Poisoned outputs with a guard behind them: every byte of the block is written, none after.
  std::vector<std::uint8_t> codes(std::size_t(d * chan + 16), 0xA5), lower(codes.size(), 0x5A);
  std::vector<std::uint16_t> scale(std::size_t(d + 4), 0xFFFF), zero(scale.size(), 0xFFFF);
  kc::quantize_key_group(x.data(), stride, G, d, p.bits, p.rule,
                         {codes.data(), hier ? lower.data() : nullptr, scale.data(), zero.data()});
  std::vector<std::uint8_t> ref_codes(std::size_t(d * chan)), ref_lower(ref_codes.size());
  for (std::int64_t c = 0; c < d; ++c) {
    std::vector<float> channel;
    for (std::int64_t t = 0; t < G; ++t) channel.push_back(x[std::size_t(t * stride + c)]);
    const auto g = test::ref_quantize(channel, p.bits, p.ref);
    test::ref_pack(ref_codes, std::size_t(c * chan), g.upper, 0, p.bits);
    if (hier) test::ref_pack(ref_lower, std::size_t(c * chan), g.lower, 0, 4);
    ASSERT_EQ(scale[std::size_t(c)], g.scale16) << "channel " << c;
    ASSERT_EQ(zero[std::size_t(c)], g.zero16) << "channel " << c;
  }
  for (std::size_t i = 0; i < ref_codes.size(); ++i) {
    ASSERT_EQ(codes[i], ref_codes[i]) << "key code byte " << i;
    if (hier) {
      ASSERT_EQ(lower[i], ref_lower[i]) << "lower-plane byte " << i;
    }
  }
  for (std::size_t i = ref_codes.size(); i < codes.size(); ++i) ASSERT_EQ(codes[i], 0xA5) << "wrote past the block";
  if (!hier) {
    EXPECT_EQ(lower[0], 0x5A);
  }
  EXPECT_EQ(scale[std::size_t(d)], 0xFFFF);
}

TEST_P(Quantize, ValueRowsMatchTheReference) {
  const auto p = GetParam();
  const std::uint64_t seed = test::default_seed + 1000 + std::uint64_t(p.bits * 7 + p.group);
  SCOPED_TRACE(test::seed_trace(seed));
  std::mt19937_64 rng(seed);
  const std::int64_t d = 80, stride = d + 5, tokens = 37, gv = std::min<std::int64_t>(p.group, d);
  const std::int64_t row = (d * p.bits + 7) / 8, groups = (d + gv - 1) / gv;
  const std::int64_t codes_stride = row + 3, scale_stride = groups + 2;
  const auto x = rows(rng, tokens, d, stride);
  const bool hier = p.rule == kc::quant_rule::hier;
  std::vector<std::uint8_t> codes(std::size_t(tokens * codes_stride), 0xA5), lower(codes.size(), 0xA5);
  std::vector<std::uint16_t> scale(std::size_t(tokens * scale_stride), 0xFFFF), zero(scale.size(), 0xFFFF);
  kc::quantize_value_rows(x.data(), stride, tokens, d, gv, p.bits, p.rule,
                          {codes.data(), hier ? lower.data() : nullptr, scale.data(), zero.data()}, codes_stride,
                          scale_stride);
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::vector<std::uint8_t> ref_codes(static_cast<std::size_t>(row)), ref_lower(static_cast<std::size_t>(row));
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t c0 = g * gv, c1 = std::min(d, c0 + gv);
      const std::vector<float> part(x.begin() + t * stride + c0, x.begin() + t * stride + c1);
      const auto q = test::ref_quantize(part, p.bits, p.ref);
      test::ref_pack(ref_codes, 0, q.upper, c0, p.bits);
      if (hier) test::ref_pack(ref_lower, 0, q.lower, c0, 4);
      ASSERT_EQ(scale[std::size_t(t * scale_stride + g)], q.scale16) << "token " << t << " group " << g;
      ASSERT_EQ(zero[std::size_t(t * scale_stride + g)], q.zero16) << "token " << t << " group " << g;
    }
    for (std::int64_t i = 0; i < row; ++i) {
      ASSERT_EQ(codes[std::size_t(t * codes_stride + i)], ref_codes[std::size_t(i)]) << "token " << t << " byte " << i;
      if (hier) {
        ASSERT_EQ(lower[std::size_t(t * codes_stride + i)], ref_lower[std::size_t(i)]);
      }
    }
    for (std::int64_t i = row; i < codes_stride; ++i)
      ASSERT_EQ(codes[std::size_t(t * codes_stride + i)], 0xA5) << "wrote into the stride gap";
    for (std::int64_t g = groups; g < scale_stride; ++g) ASSERT_EQ(scale[std::size_t(t * scale_stride + g)], 0xFFFF);
  }
}

// |x - x^| per element of a key group, against the exact (double) scale of the
// group and the f16 rounding of what is stored:
//   RTN / SpeCache: <= s/2 + |z - z16| + levels * |s - s16|
//   hier INT4:      <= s/2 + same;   hier INT8: <= s/32 + same, except the
//   residuals in (7.5, 8] s/16 that the [-8, 7] range clamps (<= s/16 there).
TEST_P(Quantize, ReconstructionErrorIsBounded) {
  const auto p = GetParam();
  const std::uint64_t seed = test::default_seed + 2000 + std::uint64_t(p.bits * 7 + p.group);
  SCOPED_TRACE(test::seed_trace(seed));
  std::mt19937_64 rng(seed);
  const std::int64_t d = 80, G = p.group, chan = G * p.bits / 8;
  const auto x = rows(rng, G, d, d);
  const bool hier = p.rule == kc::quant_rule::hier;
  std::vector<std::uint8_t> codes(std::size_t(d * chan)), lower(codes.size());
  std::vector<std::uint16_t> scale(static_cast<std::size_t>(d)), zero(scale.size());
  kc::quantize_key_group(x.data(), d, G, d, p.bits, p.rule,
                         {codes.data(), hier ? lower.data() : nullptr, scale.data(), zero.data()});
  const int levels = (1 << p.bits) - 1;
  int clamped = 0;
  for (std::int64_t c = 0; c < d; ++c) {
    double lo = 1e30, hi = -1e30;
    for (std::int64_t t = 0; t < G; ++t) {
      lo = std::min(lo, double(x[std::size_t(t * d + c)]));
      hi = std::max(hi, double(x[std::size_t(t * d + c)]));
    }
    const double s = p.rule == kc::quant_rule::specache ? (hi - lo) / 2 : (hi - lo) / levels;
    const double z = p.rule == kc::quant_rule::specache ? (3 * lo + hi) / 4 : lo;
    const double s16 = f16_to_f32(scale[std::size_t(c)]), z16 = f16_to_f32(zero[std::size_t(c)]);
    const double round_err = std::abs(z - z16) + levels * std::abs(s - s16) + 1e-6 * (std::abs(lo) + std::abs(hi));
    for (std::int64_t t = 0; t < G; ++t) {
      const double v = x[std::size_t(t * d + c)];
      const unsigned u = test::ref_unpack(codes.data() + c * chan, t, p.bits);
      const double x4 = z16 + u * s16;
      if (p.rule == kc::quant_rule::specache) {
        // Two levels, at the quartiles; each value goes to the nearer one.
        const double other = z16 + (1 - u) * s16;
        EXPECT_LE(std::abs(v - x4), std::abs(v - other) + 1e-6) << "channel " << c << " token " << t;
        EXPECT_NEAR(x4, u ? (lo + 3 * hi) / 4 : (3 * lo + hi) / 4, round_err);
      } else {
        EXPECT_LE(std::abs(v - x4), s / 2 + round_err) << "channel " << c << " token " << t;
      }
      if (!hier) continue;
      const unsigned l = test::ref_unpack(lower.data() + c * chan, t, 4);
      const double x8 = x4 + (double(l) - 8) * s16 / 16;
      const bool sliver = (v - x4) > 7.5 * s16 / 16;
      clamped += sliver;
      EXPECT_LE(std::abs(v - x8), (sliver ? s / 16 : s / 32) + round_err) << "channel " << c << " token " << t;
    }
  }
  if (hier) {
    // The clamped sliver is a small share (about 1/32 of uniform data).
    EXPECT_LT(clamped, int(d * G / 10));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, Quantize,
    ::testing::Values(format_case{kc::quant_rule::rtn, ref_rule::rtn, 1, 64}, format_case{kc::quant_rule::rtn, ref_rule::rtn, 2, 64},
                      format_case{kc::quant_rule::rtn, ref_rule::rtn, 4, 64}, format_case{kc::quant_rule::rtn, ref_rule::rtn, 2, 32},
                      format_case{kc::quant_rule::rtn, ref_rule::rtn, 4, 128},
                      format_case{kc::quant_rule::specache, ref_rule::specache, 1, 64},
                      format_case{kc::quant_rule::specache, ref_rule::specache, 1, 32},
                      format_case{kc::quant_rule::hier, ref_rule::hier, 4, 128},
                      format_case{kc::quant_rule::hier, ref_rule::hier, 4, 32}),
    case_name);

TEST(Quantize, ConstantGroupHasZeroScaleAndExactReconstruction) {
  std::vector<float> x(64 * 8, 0.75f);
  std::vector<std::uint8_t> codes(8 * 64 * 2 / 8);
  std::vector<std::uint16_t> scale(8), zero(8);
  kc::quantize_key_group(x.data(), 8, 64, 8, 2, kc::quant_rule::rtn, {codes.data(), nullptr, scale.data(), zero.data()});
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(f16_to_f32(scale[std::size_t(c)]), 0.0f);
    EXPECT_EQ(f16_to_f32(zero[std::size_t(c)]), 0.75f);
  }
  for (auto b : codes) EXPECT_EQ(b, 0);
}

TEST(Quantize, RejectsBitsThatDoNotFitTheRule) {
  std::vector<float> x(64);
  std::vector<std::uint8_t> codes(64);
  std::uint16_t s[8], z[8];
  EXPECT_THROW(kc::quantize_key_group(x.data(), 8, 8, 8, 2, kc::quant_rule::specache, {codes.data(), nullptr, s, z}),
               std::invalid_argument);
  EXPECT_THROW(kc::quantize_key_group(x.data(), 8, 8, 8, 4, kc::quant_rule::hier, {codes.data(), nullptr, s, z}),
               std::invalid_argument);
  EXPECT_THROW(kc::quantize_key_group(x.data(), 8, 6, 8, 1, kc::quant_rule::rtn, {codes.data(), nullptr, s, z}),
               std::invalid_argument);
}

}  // namespace
}  // namespace specpipe
