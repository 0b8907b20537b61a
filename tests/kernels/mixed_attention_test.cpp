// Mixed attention: the low-bit cache with per-KV-head positions read from
// separate 16-bit (or f32) rows.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/mixed_attention.hpp"
#include "kernels/quant_packed_fixture.hpp"

namespace specpipe {
namespace {

namespace kc = kernels::cpu;

std::vector<float> exact(const test::packed_fixture& f, const std::vector<float>& k, const std::vector<float>& v,
                         const std::vector<float>& q, std::int64_t n, std::int64_t pos0) {
  return test::full_attention(f, k, v, q, n, pos0);
}

// Rows of `src` ([len, kv_heads, d]) at the given positions, as [kv_heads][stride][d].
template <class T, class Conv>
std::vector<T> gather(const test::packed_fixture& f, const std::vector<float>& src,
                      const std::vector<std::int64_t>& pos, const std::vector<std::int64_t>& count, std::int64_t stride,
                      Conv conv) {
  std::vector<T> out(std::size_t(f.kv_heads * stride * f.d));
  for (std::int64_t h = 0; h < f.kv_heads; ++h)
    for (std::int64_t r = 0; r < count[std::size_t(h)]; ++r)
      for (std::int64_t c = 0; c < f.d; ++c)
        out[std::size_t((h * stride + r) * f.d + c)] =
            conv(src[std::size_t((pos[std::size_t(h * stride + r)] * f.kv_heads + h) * f.d + c)]);
  return out;
}

TEST(MixedAttention, AllPositionsReplacedByF32RowsEqualsFullPrecision) {
  for (const auto rule : {kc::quant_rule::rtn, kc::quant_rule::specache}) {
    test::packed_fixture f;
    f.rule = rule;
    f.bits = 1;
    f.build(test::default_seed + 5);
    const std::int64_t stride = f.len();
    std::vector<std::int64_t> pos(std::size_t(f.kv_heads * stride)), count(std::size_t(f.kv_heads), stride);
    for (std::int64_t h = 0; h < f.kv_heads; ++h)
      for (std::int64_t j = 0; j < stride; ++j) pos[std::size_t(h * stride + j)] = j;
    const auto id = [](float x) { return x; };
    const auto rk = gather<float>(f, f.k, pos, count, stride, id), rv = gather<float>(f, f.v, pos, count, stride, id);
    kc::mixed_rows rows{pos.data(), count.data(), stride, rk.data(), rv.data(), dtype::f32};
    std::mt19937_64 rng(7);
    const std::int64_t n = 5, pos0 = f.len() - n;
    const auto q = test::random_floats(rng, std::size_t(n * f.heads * f.d));
    const auto ref = exact(f, f.k, f.v, q, n, pos0);
    test::poisoned_output out(ref.size());
    kc::thread_pool pool(2);
    kc::mixed_attention(f.args(q.data(), n, pos0, out.data()), rows, &pool);
    ASSERT_TRUE(out.check_sentinels());
    for (std::size_t i = 0; i < ref.size(); ++i)
      ASSERT_NEAR(out.data()[i], ref[i], 1e-5 + 1e-5 * std::abs(ref[i])) << "element " << i;
  }
}

TEST(MixedAttention, SomeF16RowsReplaceTheirDequantizedPositions) {
  test::packed_fixture f;
  f.rule = kc::quant_rule::rtn;
  f.bits = 2;
  f.build(test::default_seed + 6);
  std::vector<float> dk, dv;
  f.dequantized(dk, dv);
  // Different sets per KV head, in the packed part and in the window.
  const std::int64_t stride = 8;
  std::vector<std::int64_t> pos = {0, 3, 31, 32, 50, 95, 100, 110, 7, 8, 64, 0, 0, 0, 0, 0};
  std::vector<std::int64_t> count = {8, 3};
  const auto to16 = [](float x) { return f32_to_f16(x); };
  const auto rk = gather<std::uint16_t>(f, f.k, pos, count, stride, to16);
  const auto rv = gather<std::uint16_t>(f, f.v, pos, count, stride, to16);
  for (std::int64_t h = 0; h < f.kv_heads; ++h)
    for (std::int64_t r = 0; r < count[std::size_t(h)]; ++r)
      for (std::int64_t c = 0; c < f.d; ++c) {
        const std::size_t at = std::size_t((pos[std::size_t(h * stride + r)] * f.kv_heads + h) * f.d + c);
        dk[at] = f16_to_f32(f32_to_f16(f.k[at]));
        dv[at] = f16_to_f32(f32_to_f16(f.v[at]));
      }
  kc::mixed_rows rows{pos.data(), count.data(), stride, rk.data(), rv.data(), dtype::f16};
  std::mt19937_64 rng(8);
  const std::int64_t n = 3, pos0 = f.len() - n;
  const auto q = test::random_floats(rng, std::size_t(n * f.heads * f.d));
  const auto ref = exact(f, dk, dv, q, n, pos0);
  std::vector<float> out(ref.size());
  kc::mixed_attention(f.args(q.data(), n, pos0, out.data()), rows);
  for (std::size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-5 + 1e-5 * std::abs(ref[i])) << i;
  // And it differs from the plain low-bit result (the rows did something).
  std::vector<float> plain(ref.size());
  kc::quantized_attention(f.args(q.data(), n, pos0, plain.data()));
  double diff = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) diff += std::abs(plain[i] - out[i]);
  EXPECT_GT(diff, 1e-3);
}

TEST(MixedAttention, RejectsUnsortedPositions) {
  test::packed_fixture f;
  f.build(test::default_seed);
  std::vector<std::int64_t> pos = {5, 3, 0, 1}, count = {2, 2};
  std::vector<float> rk(std::size_t(4 * f.d)), q(std::size_t(f.heads * f.d)), out(q.size());
  kc::mixed_rows rows{pos.data(), count.data(), 2, rk.data(), rk.data(), dtype::f32};
  EXPECT_THROW(kc::mixed_attention(f.args(q.data(), 1, f.len() - 1, out.data()), rows), std::invalid_argument);
}

}  // namespace
}  // namespace specpipe
