// The GPU's 4-bit weight quantizer (kernels/cuda/int4_quantize.hpp) against
// the CPU's kernels::cpu::quantize_int4 on the same bf16 values, bit for bit:
// every code byte of every row (the padding up to code_stride included, over
// a destination poisoned first), every f16 scale and zero. Shapes with odd
// row counts, short last groups, odd widths and padded row strides; groups
// 2 .. 1024; rows that are constant (zero scale), carry outliers, mix +0 and
// -0 (which zero the CPU keeps decides the zero point's bits), are tiny
// (f16 subnormal scales, bf16 subnormal weights) or overflow f16; and
// non-finite weights. Bad arguments are refused before any device work.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/int4_linear.hpp"
#include "tests/kernels/cuda_test_util.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/int4_quantize.hpp"
#endif

namespace specpipe::test {
namespace {

class cuda_int4_quantize : public cuda_test {};

#ifdef SPECPIPE_HAVE_CUDA
namespace kc = kernels::cuda;
namespace kcpu = kernels::cpu;

// bf16 bit patterns the f32 round trip would not give (or not obviously).
constexpr std::uint16_t bf16_neg_zero = 0x8000, bf16_inf = 0x7f80, bf16_neg_inf = 0xff80, bf16_nan = 0x7fc0,
                        bf16_neg_nan = 0xffc0;

template <class T>
void expect_equal(const std::vector<T>& got, const std::vector<T>& want, std::int64_t row_len, const char* name,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what << " " << name;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && bad++ < 5)
      ADD_FAILURE() << what << ": " << name << " [row " << std::int64_t(i) / row_len << "][" << std::int64_t(i) % row_len
                    << "] is 0x" << std::hex << unsigned(got[i]) << ", expected 0x" << unsigned(want[i]);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " " << name << " differ";
}

// Quantizes the bf16 matrix w [out][ldw] on both sides and compares. A
// code_stride beyond the format's is checked to hold the CPU's row and
// zeros after it.
void run_case(allocator& dev, const std::vector<std::uint16_t>& w, std::int64_t out, std::int64_t in,
              std::int64_t ldw, std::int64_t group, const std::string& what, std::int64_t extra_stride = 0) {
  SCOPED_TRACE(what);
  ASSERT_EQ(w.size(), std::size_t(out * ldw));
  const kcpu::int4_weights q = kcpu::quantize_int4(w.data(), dtype::bf16, out, in, ldw, group);
  const std::int64_t groups = (in + group - 1) / group;
  const std::int64_t stride = q.code_stride + extra_stride;
  std::vector<std::uint8_t> want_codes(std::size_t(out * stride), 0);
  for (std::int64_t r = 0; r < out; ++r)
    std::copy_n(q.codes.begin() + r * q.code_stride, q.code_stride, want_codes.begin() + r * stride);

  dev_array<std::uint16_t> dw(dev, w);
  dev_array<std::uint8_t> dcodes(dev, want_codes.size(), 0xAB);
  dev_array<std::uint16_t> dscale(dev, q.scale.size(), 0xCD), dzero(dev, q.zero.size(), 0xEF);
  kc::int4_quantize_args a;
  a.w = dw.get();
  a.ldw = ldw;
  a.codes = dcodes.get();
  a.code_stride = stride;
  a.scale = dscale.get();
  a.zero = dzero.get();
  a.out = out;
  a.in = in;
  a.group = group;
  kc::int4_quantize(a, nullptr);

  expect_equal(dcodes.download(), want_codes, stride, "code byte", what);
  expect_equal(dscale.download(), q.scale, groups, "scale", what);
  expect_equal(dzero.download(), q.zero, groups, "zero", what);
  EXPECT_TRUE(dcodes.sentinel_intact()) << what << ": codes written past the end";
  EXPECT_TRUE(dscale.sentinel_intact() && dzero.sentinel_intact()) << what << ": scale/zero written past the end";
}

// Random bf16 weights [out][ldw] with outliers up to `outlier`; the padding
// columns get huge values that must not reach any group.
std::vector<std::uint16_t> random_weights(std::mt19937& rng, std::int64_t out, std::int64_t in, std::int64_t ldw,
                                          float outlier = 8.f) {
  auto v = random_values(rng, std::size_t(out * ldw), outlier);
  for (std::int64_t r = 0; r < out; ++r)
    for (std::int64_t c = in; c < ldw; ++c) v[std::size_t(r * ldw + c)] = (c % 2 ? 1e6f : -1e6f);
  return to_bf16(v);
}

std::string shape_name(std::int64_t out, std::int64_t in, std::int64_t ldw, std::int64_t group) {
  return "out=" + std::to_string(out) + " in=" + std::to_string(in) + " ldw=" + std::to_string(ldw) +
         " group=" + std::to_string(group);
}

TEST_F(cuda_int4_quantize, matches_the_cpu_on_random_weights) {
  struct shape {
    std::int64_t out, in, group, ld_pad;
  };
  const shape shapes[] = {
      {1, 128, 128, 0},    {7, 256, 32, 0},     {33, 200, 64, 0},   // 200 = 3 * 64 + 8: short last group
      {77, 1000, 128, 3},  {5, 129, 128, 0},    {5, 129, 128, 1},   // odd in: half a byte, a 1-column group
      {129, 333, 32, 5},   {3, 4096, 128, 0},   {2, 2050, 1024, 0}, {11, 3000, 1024, 7},
      {4, 1, 2, 0},        {9, 7, 2, 0},        {13, 96, 96, 0},    {6, 500, 96, 2},
      {17, 1408, 64, 0},   {300, 64, 64, 0},    {31, 1030, 256, 0}, {10, 777, 512, 1},
  };
  unsigned seed = 7100;
  for (const auto& s : shapes) {
    std::mt19937 rng(++seed);
    const std::int64_t ldw = s.in + s.ld_pad;
    run_case(*dev_, random_weights(rng, s.out, s.in, ldw), s.out, s.in, ldw, s.group,
             shape_name(s.out, s.in, ldw, s.group) + " seed " + std::to_string(seed));
  }
}

TEST_F(cuda_int4_quantize, llama_shapes_match) {
  std::mt19937 rng(7200);
  run_case(*dev_, random_weights(rng, 1024, 4096, 4096), 1024, 4096, 4096, 128, "q_proj rows 0..1023");
  run_case(*dev_, random_weights(rng, 64, 14336, 14336), 64, 14336, 14336, 128, "down_proj rows 0..63");
}

// Rows built one by one, each exercising an edge of the rounding: row r of
// `rows` is given in columns [0, in), the rest of ldw is padding.
std::vector<std::uint16_t> build(std::int64_t in, std::int64_t ldw,
                                 const std::vector<std::function<std::uint16_t(std::int64_t)>>& rows) {
  std::vector<std::uint16_t> w(rows.size() * std::size_t(ldw), f32_to_bf16(-3e4f));
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::int64_t c = 0; c < in; ++c) w[r * std::size_t(ldw) + std::size_t(c)] = rows[r](c);
  return w;
}

TEST_F(cuda_int4_quantize, edge_rows_match) {
  std::mt19937 rng(7300);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const auto bf = [](float x) { return f32_to_bf16(x); };
  // Fixed random draws, so every row is a function of its column.
  std::vector<float> noise(4096);
  for (auto& x : noise) x = u(rng);
  const auto rnd = [&](std::int64_t c) { return noise[std::size_t(c) % noise.size()]; };

  for (const std::int64_t group : {32, 64, 128, 1024}) {
    const std::int64_t in = 3 * group + group / 2 + 1, ldw = in + 2;  // short, odd last group
    const std::vector<std::function<std::uint16_t(std::int64_t)>> rows = {
        [&](std::int64_t) { return bf(0.375f); },          // constant, f16-exact: scale 0, codes 0
        [&](std::int64_t) { return bf(0.1f); },            // constant, not f16-exact: a tiny scale
        [&](std::int64_t) { return bf(-7.f); },            // negative constant
        [&](std::int64_t) { return std::uint16_t(0); },    // +0
        [&](std::int64_t) { return bf16_neg_zero; },       // -0: zero point -0
        [&](std::int64_t c) { return c % 2 ? bf16_neg_zero : std::uint16_t(0); },  // +0 first
        [&](std::int64_t c) { return c % 2 ? std::uint16_t(0) : bf16_neg_zero; },  // -0 first
        // Non-negative rows whose minimum is a zero of either sign, the
        // first of them in a later lane than the other sign's: the CPU keeps
        // the first in column order.
        [&](std::int64_t c) {
          const std::int64_t k = c % group;
          return k == 45 ? std::uint16_t(0) : k == 70 || k == 3 + group / 2 ? bf16_neg_zero : bf(std::fabs(rnd(c)) + 0.01f);
        },
        [&](std::int64_t c) {
          const std::int64_t k = c % group;
          return k == 45 ? bf16_neg_zero : k == 70 || k == 3 + group / 2 ? std::uint16_t(0) : bf(std::fabs(rnd(c)) + 0.01f);
        },
        // Non-positive rows whose maximum is a zero (either sign first).
        [&](std::int64_t c) {
          const std::int64_t k = c % group;
          return k == 9 ? bf16_neg_zero : k == group - 2 ? std::uint16_t(0) : bf(-std::fabs(rnd(c)) - 0.5f);
        },
        [&](std::int64_t c) {
          const std::int64_t k = c % group;
          return k == 9 ? std::uint16_t(0) : k == group - 2 ? bf16_neg_zero : bf(-std::fabs(rnd(c)) - 0.5f);
        },
        // Outliers: one huge column per group, both signs.
        [&](std::int64_t c) { return bf(c % group == 17 ? 300.f : c % group == 40 ? -1000.f : rnd(c)); },
        [&](std::int64_t c) { return bf(c % 97 == 0 ? 60000.f : rnd(c)); },
        // Two-level rows (codes exactly 0 and 15) and a ramp (every code, ties included).
        [&](std::int64_t c) { return bf(c % 3 ? 1.f : -1.f); },
        [&](std::int64_t c) { return bf(float(c % group % 31) * 0.25f - 2.f); },
        // Tiny magnitudes: f16 subnormal zero/scale, f16 underflow, bf16 (f32) subnormals.
        [&](std::int64_t c) { return bf(rnd(c) * 1e-5f); },
        [&](std::int64_t c) { return bf(rnd(c) * 1e-30f); },
        [&](std::int64_t c) { return bf(rnd(c) * 1e-39f); },
        // Large positive magnitudes: the scale overflows f16 to infinity.
        [&](std::int64_t c) { return bf(std::fabs(rnd(c)) * 1e6f + 1.f); },
        [&](std::int64_t c) { return bf(std::fabs(rnd(c)) * 70000.f); },
        // Everything random, with outliers up to 8.
        [&](std::int64_t c) { return bf(c % 53 == 0 ? 8.f * rnd(c + 1) : rnd(c)); },
    };
    run_case(*dev_, build(in, ldw, rows), std::int64_t(rows.size()), in, ldw, group,
             "edge rows, group=" + std::to_string(group));
  }
}

TEST_F(cuda_int4_quantize, non_finite_weights_match_on_x86) {
#if !(defined(__x86_64__) || defined(__i386__))
  GTEST_SKIP() << "the CPU reference's NaN signs are those of x86 SSE";
#endif
  // A NaN first element makes min and max NaN; NaN elsewhere is skipped by
  // the min/max and codes 0; infinities give infinite zero points and NaN
  // (all +inf or all -inf) or infinite scales; a minimum below -65504 rounds
  // the zero point down to -inf.
  const std::int64_t group = 64, in = 2 * group, ldw = in;
  const auto bf = [](float x) { return f32_to_bf16(x); };
  const auto ramp = [&](std::int64_t c) { return bf(float(c % 13) - 6.f); };
  const std::vector<std::function<std::uint16_t(std::int64_t)>> rows = {
      [&](std::int64_t c) { return c % group == 0 ? bf16_nan : ramp(c); },
      [&](std::int64_t c) { return c % group == 0 ? bf16_neg_nan : ramp(c); },
      [&](std::int64_t c) { return c % group == 5 ? bf16_nan : ramp(c); },
      [&](std::int64_t c) { return c % 7 == 1 ? bf16_neg_nan : ramp(c); },
      [&](std::int64_t c) { return c % group == 33 ? bf16_inf : ramp(c); },
      [&](std::int64_t c) { return c % group == 33 ? bf16_neg_inf : ramp(c); },
      [&](std::int64_t) { return bf16_inf; },
      [&](std::int64_t) { return bf16_neg_inf; },
      [&](std::int64_t c) { return c % group == 2 ? bf(-1e5f) : ramp(c); },
      [&](std::int64_t) { return bf16_nan; },
  };
  run_case(*dev_, build(in, ldw, rows), std::int64_t(rows.size()), in, ldw, group, "non-finite rows");
}

TEST_F(cuda_int4_quantize, pads_a_wider_code_stride_with_zeros) {
  std::mt19937 rng(7400);
  run_case(*dev_, random_weights(rng, 19, 301, 301), 19, 301, 301, 64, "code_stride + 48", 48);
  run_case(*dev_, random_weights(rng, 3, 64, 64), 3, 64, 64, 32, "code_stride + 1", 1);
}

// Validation throws before the device is touched (the pointers below are
// never dereferenced), so this needs no GPU.
TEST(cuda_int4_quantize_args, bad_arguments_are_refused_naming_the_field) {
  alignas(16) static std::uint16_t w[64], scale[8], zero[8];
  alignas(16) static std::uint8_t codes[64];
  const auto good = [&] {
    kc::int4_quantize_args a;
    a.w = w;
    a.ldw = 64;
    a.codes = codes;
    a.code_stride = 32;
    a.scale = scale;
    a.zero = zero;
    a.out = 1;
    a.in = 64;
    a.group = 32;
    return a;
  };
  const auto expect_refused = [](const kc::int4_quantize_args& a, const char* field) {
    try {
      kc::int4_quantize(a, nullptr);
      ADD_FAILURE() << "accepted bad " << field;
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), ::testing::StartsWith(std::string("int4_quantize: ") + field + " ")) << field;
    }
  };
  auto a = good();
  a.w = nullptr;
  expect_refused(a, "w");
  a = good();
  a.codes = nullptr;
  expect_refused(a, "codes");
  a = good();
  a.scale = nullptr;
  expect_refused(a, "scale");
  a = good();
  a.zero = nullptr;
  expect_refused(a, "zero");
  a = good();
  a.w = reinterpret_cast<const std::uint16_t*>(reinterpret_cast<const std::uint8_t*>(w) + 1);
  expect_refused(a, "w");
  a = good();
  a.scale = reinterpret_cast<std::uint16_t*>(reinterpret_cast<std::uint8_t*>(scale) + 1);
  expect_refused(a, "scale");
  a = good();
  a.out = 0;
  expect_refused(a, "out");
  a = good();
  a.in = -1;
  expect_refused(a, "in");
  for (const std::int64_t g : {0, -2, 3, 1026, 2048}) {
    a = good();
    a.group = g;
    expect_refused(a, "group");
  }
  a = good();
  a.ldw = 63;
  expect_refused(a, "ldw");
  a = good();
  a.code_stride = 31;
  expect_refused(a, "code_stride");
  a = good();
  a.in = 63;
  a.ldw = 63;
  a.code_stride = 31;  // (63 + 1) / 2 = 32 bytes needed
  expect_refused(a, "code_stride");
  a = good();
  a.out = std::int64_t(1) << 40;
  expect_refused(a, "out");
}
#else
TEST_F(cuda_int4_quantize, skipped_without_cuda) {}
#endif

}  // namespace
}  // namespace specpipe::test
