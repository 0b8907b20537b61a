// 4-bit group-quantized weights (QuantSpec's draft): packing against the
// formula, error bound, and the fused GEMV against a linear over the
// dequantized matrix.
#include "kernels/int4_linear.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "kernels/cpu/thread_pool.hpp"
#include "support/test_util.hpp"

namespace specpipe::kernels::cpu {
namespace {

// W with a few large outliers, stored in `type`; f32 holds the stored values.
struct weight_matrix {
  std::vector<float> f32;
  std::vector<std::uint16_t> halves;
  dtype type;
  const void* data() const {
    return type == dtype::f32 ? static_cast<const void*>(f32.data()) : static_cast<const void*>(halves.data());
  }
};

weight_matrix make_weights(std::mt19937_64& rng, std::size_t count, dtype t) {
  weight_matrix w{test::random_floats(rng, count, -0.05f, 0.05f, 0.01), {}, t};
  if (t != dtype::f32) {
    w.halves = test::to_half_codes(w.f32, t);
    w.f32 = test::from_half_codes(w.halves, t);
  }
  return w;
}

// Every finite f16 value, ascending: the reference picks scale and zero by
// search instead of by stepping codes as the kernel does.
const std::vector<std::pair<float, std::uint16_t>>& f16_table() {
  static const auto table = [] {
    std::vector<std::pair<float, std::uint16_t>> t;
    for (std::uint32_t h = 0; h < 65536; ++h) {
      const float v = f16_to_f32(std::uint16_t(h));
      if (std::isfinite(v)) t.emplace_back(v, std::uint16_t(h));
    }
    std::stable_sort(t.begin(), t.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return t;
  }();
  return table;
}
// An exactly representable value keeps its own code (and the sign of a zero).
std::uint16_t largest_f16_at_most(float v) {
  if (f16_to_f32(f32_to_f16(v)) == v) return f32_to_f16(v);
  const auto& t = f16_table();
  auto it = std::upper_bound(t.begin(), t.end(), v, [](float x, const auto& e) { return x < e.first; });
  return std::prev(it)->second;
}
std::uint16_t smallest_f16_at_least(float v) {
  if (f16_to_f32(f32_to_f16(v)) == v) return f32_to_f16(v);
  const auto& t = f16_table();
  return std::lower_bound(t.begin(), t.end(), v, [](const auto& e, float x) { return e.first < x; })->second;
}

// The format written out directly: z = min (down to f16), s = (max - z) / 15
// (up to f16), q = floor((w - z) / s + 1/2) clamped to [0, 15], column c in
// byte c / 2 at nibble c % 2.
int4_weights reference_pack(const std::vector<float>& w, std::int64_t out, std::int64_t in, std::int64_t stride,
                            std::int64_t group) {
  int4_weights q;
  q.out = out;
  q.in = in;
  q.group = group;
  q.code_stride = ((in + 1) / 2 + 15) / 16 * 16;
  const std::int64_t groups = (in + group - 1) / group;
  q.codes.assign(std::size_t(out * q.code_stride), 0);
  for (std::int64_t r = 0; r < out; ++r)
    for (std::int64_t g = 0; g < groups; ++g) {
      const auto first = w.begin() + r * stride + g * group;
      const auto last = w.begin() + r * stride + std::min(in, (g + 1) * group);
      const float lo = *std::min_element(first, last), hi = *std::max_element(first, last);
      const std::uint16_t zh = largest_f16_at_most(lo);
      const float z = f16_to_f32(zh);
      const std::uint16_t sh = smallest_f16_at_least((hi - z) / 15.0f);
      const float s = f16_to_f32(sh);
      q.zero.push_back(zh);
      q.scale.push_back(sh);
      for (auto it = first; it != last; ++it) {
        const std::int64_t c = g * group + (it - first);
        const int code = s > 0 ? int(std::clamp(std::floor((*it - z) / s + 0.5f), 0.0f, 15.0f)) : 0;
        q.codes[std::size_t(r * q.code_stride + c / 2)] |= std::uint8_t(code << (4 * (c % 2)));
      }
    }
  return q;
}

using shape = std::tuple<dtype, std::int64_t, std::int64_t, std::int64_t>;  // type, out, in, group

class int4_shapes : public ::testing::TestWithParam<shape> {};

TEST_P(int4_shapes, packing_is_bit_exact_with_the_formula_and_error_is_at_most_half_a_step) {
  const auto [type, out, in, group] = GetParam();
  const std::uint64_t seed = test::default_seed + std::uint64_t(out * 31 + in * 7 + group);
  SCOPED_TRACE(test::seed_trace(seed));
  std::mt19937_64 rng(seed);
  const std::int64_t stride = in + 5;  // a padded row stride
  const auto w = make_weights(rng, std::size_t(out * stride), type);
  thread_pool pool(2);
  const int4_weights got = quantize_int4(w.data(), type, out, in, stride, group, &pool);
  const int4_weights ref = reference_pack(w.f32, out, in, stride, group);
  EXPECT_EQ(got.code_stride, ref.code_stride);
  EXPECT_EQ(got.codes, ref.codes);
  EXPECT_EQ(got.scale, ref.scale);
  EXPECT_EQ(got.zero, ref.zero);
  EXPECT_EQ(got.bytes(), int4_bytes(out, in, group));

  std::vector<float> row(static_cast<std::size_t>(in));
  const std::int64_t groups = (in + group - 1) / group;
  for (std::int64_t r = 0; r < out; ++r) {
    dequantize_int4_row(got.view(), r, row.data());
    for (std::int64_t c = 0; c < in; ++c) {
      const float s = f16_to_f32(got.scale[std::size_t(r * groups + c / group)]);
      const float v = w.f32[std::size_t(r * stride + c)];
      // s/2, plus the f32 rounding of z + s * q.
      ASSERT_LE(std::fabs(row[std::size_t(c)] - v), 0.5f * s + 1e-6f * (std::fabs(v) + 16 * s))
          << "row " << r << " column " << c << " scale " << s;
    }
  }
}

TEST_P(int4_shapes, linear_equals_a_linear_over_the_dequantized_weights) {
  const auto [type, out, in, group] = GetParam();
  const std::uint64_t seed = test::default_seed + 17 + std::uint64_t(out * 31 + in * 7 + group);
  SCOPED_TRACE(test::seed_trace(seed));
  std::mt19937_64 rng(seed);
  const auto w = make_weights(rng, std::size_t(out * in), type);
  const int4_weights q = quantize_int4(w.data(), type, out, in, 0, group);
  std::vector<float> deq(std::size_t(out * in));
  for (std::int64_t r = 0; r < out; ++r) dequantize_int4_row(q.view(), r, deq.data() + r * in);

  thread_pool pool(2);
  for (const std::int64_t n : {1, 3, 11}) {
    const std::int64_t x_stride = in + 3, y_stride = out + 2;
    const auto x = test::random_floats(rng, std::size_t(n * x_stride), -1.0f, 1.0f, 0.02);
    test::poisoned_output y(std::size_t(n * y_stride));
    int4_linear_args a;
    a.x = x.data();
    a.x_stride = x_stride;
    a.w = q.view();
    a.y = y.data();
    a.y_stride = y_stride;
    a.n = n;
    int4_linear(a, &pool);
    ASSERT_TRUE(y.check_sentinels()) << "n " << n;
    std::vector<float> got;
    std::vector<double> ref;
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t o = 0; o < out; ++o) {
        double s = 0;
        for (std::int64_t c = 0; c < in; ++c)
          s += double(x[std::size_t(t * x_stride + c)]) * double(deq[std::size_t(o * in + c)]);
        ref.push_back(s);
        got.push_back(y.data()[t * y_stride + o]);
      }
    EXPECT_TRUE(test::all_close(got.data(), ref.data(), got.size(), 1e-5, 1e-4)) << "n " << n;
  }
}

INSTANTIATE_TEST_SUITE_P(
    shapes, int4_shapes,
    ::testing::Values(shape{dtype::bf16, 48, 512, 128}, shape{dtype::f32, 7, 300, 128},  // a short last group
                      shape{dtype::f16, 5, 77, 32},                                      // odd in
                      shape{dtype::bf16, 9, 1408, 128}, shape{dtype::f32, 3, 10, 2},
                      shape{dtype::bf16, 700, 256, 128},  // rows enough for several threads
                      shape{dtype::bf16, 64, 1408, 32}, shape{dtype::bf16, 96, 512, 64}));  // the default model's shapes, finer groups

TEST(int4_linear, a_token_in_a_batch_is_bitwise_the_token_alone) {
  std::mt19937_64 rng(test::default_seed);
  const std::int64_t out = 37, in = 384;
  const auto w = make_weights(rng, std::size_t(out * in), dtype::bf16);
  const int4_weights q = quantize_int4(w.data(), dtype::bf16, out, in, 0, 128);
  const std::int64_t n = 10;
  const auto x = test::random_floats(rng, std::size_t(n * in), -1.0f, 1.0f, 0.02);
  std::vector<float> batch(static_cast<std::size_t>(n * out)), one(static_cast<std::size_t>(out));
  thread_pool pool(2);
  int4_linear_args a;
  a.x = x.data();
  a.w = q.view();
  a.y = batch.data();
  a.n = n;
  int4_linear(a, &pool);
  for (std::int64_t t = 0; t < n; ++t) {
    a.x = x.data() + t * in;
    a.y = one.data();
    a.n = 1;
    int4_linear(a, &pool);
    for (std::int64_t o = 0; o < out; ++o) ASSERT_EQ(one[std::size_t(o)], batch[std::size_t(t * out + o)]) << t;
  }
}

TEST(int4_linear, threads_compute_what_one_thread_computes) {
  // Enough rows that every thread of the pool takes chunks of them: each must
  // read the caller's prepared input, not its own.
  std::mt19937_64 rng(test::default_seed + 3);
  const std::int64_t out = 2000, in = 128;
  const auto w = make_weights(rng, std::size_t(out * in), dtype::bf16);
  const int4_weights q = quantize_int4(w.data(), dtype::bf16, out, in, 0, 128);
  for (const std::int64_t n : {1, 5}) {
    const auto x = test::random_floats(rng, std::size_t(n * in));
    std::vector<float> alone(static_cast<std::size_t>(n * out)), pooled(alone.size());
    int4_linear_args a;
    a.x = x.data();
    a.w = q.view();
    a.n = n;
    a.y = alone.data();
    int4_linear(a);
    thread_pool pool(4);
    a.y = pooled.data();
    int4_linear(a, &pool);
    EXPECT_EQ(pooled, alone) << "n " << n;
  }
}

TEST(int4_linear, a_constant_group_is_exact) {
  std::vector<float> w(256, 0.25f);
  const int4_weights q = quantize_int4(w.data(), dtype::f32, 2, 128, 0, 128);
  std::vector<float> row(128);
  dequantize_int4_row(q.view(), 1, row.data());
  for (float v : row) EXPECT_EQ(v, 0.25f);
}

TEST(int4_linear, bad_arguments_are_named) {
  std::vector<float> w(64, 1.0f);
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { quantize_int4(w.data(), dtype::f32, 2, 32, 0, 7); }).find("group must be even"),
            std::string::npos);
  EXPECT_NE(message([&] { quantize_int4(w.data(), dtype::i8, 2, 32, 0, 8); }).find("dtype i8"), std::string::npos);
  EXPECT_NE(message([&] { quantize_int4(w.data(), dtype::f32, 2, 32, 16, 8); }).find("row stride 16"),
            std::string::npos);
  int4_linear_args a;
  EXPECT_NE(message([&] { int4_linear(a); }).find("no codes"), std::string::npos);
}

}  // namespace
}  // namespace specpipe::kernels::cpu
