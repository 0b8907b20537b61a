// RMSNorm, fused RoPE + KV append, SwiGLU, embedding and conversions on the
// GPU against double-precision references.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels/cuda_test_util.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/elementwise.hpp"
#endif

namespace specpipe::test {
namespace {

class cuda_elementwise : public cuda_test {};

#ifdef SPECPIPE_HAVE_CUDA
namespace kc = kernels::cuda;

// Hidden sizes for both kernels: odd (the scalar loop), multiples of 4 with
// 1, 2, 4 and 8 vectors per thread (some with a ragged last vector), and
// past the vector kernel's 8192; plain and dependent (PDL) launches.
TEST_F(cuda_elementwise, rmsnorm_with_and_without_residual_add) {
  struct shape {
    std::int64_t hidden, ld;
  };
  unsigned seed = 10;
  for (const shape sh : {shape{1003, 1010}, shape{512, 516}, shape{1500, 1500}, shape{4096, 4096}, shape{5000, 5004},
                         shape{8192, 8192}, shape{9000, 9000}})
  for (const bool with_delta : {false, true}) {
    ++seed;
    std::mt19937 rng(seed);
    const std::int64_t rows = 5, hidden = sh.hidden, ld = sh.ld;
    const bool dependent = seed % 2 == 0;
    SCOPED_TRACE("hidden " + std::to_string(hidden) + (with_delta ? " with delta" : "") +
                 (dependent ? " dependent" : ""));
    auto res = random_values(rng, std::size_t(rows * ld));
    auto delta = round_bf16(random_values(rng, std::size_t(rows * ld)));
    auto w = random_values(rng, std::size_t(hidden));
    dev_array<float> d_res(*dev_, res);
    dev_array<std::uint16_t> d_delta(*dev_, to_bf16(delta));
    dev_array<float> d_w(*dev_, w);
    dev_array<std::uint16_t> d_out(*dev_, std::size_t(rows * ld));
    kc::rmsnorm(d_res.get(), ld, with_delta ? d_delta.get() : nullptr, ld, d_w.get(), d_out.get(), ld, rows, hidden,
                1e-5f, nullptr, dependent);
    std::vector<double> ref_out(std::size_t(rows * hidden)), ref_res(std::size_t(rows * hidden));
    std::vector<float> got_out, got_res;
    const auto out = from_bf16(d_out.download());
    const auto r2 = d_res.download();
    for (std::int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (std::int64_t i = 0; i < hidden; ++i) {
        const double v = double(res[r * ld + i]) + (with_delta ? double(delta[r * ld + i]) : 0.0);
        ref_res[r * hidden + i] = v;
        ss += v * v;
      }
      const double inv = 1.0 / std::sqrt(ss / double(hidden) + 1e-5);
      for (std::int64_t i = 0; i < hidden; ++i) {
        ref_out[r * hidden + i] = ref_res[r * hidden + i] * inv * w[i];
        got_out.push_back(out[r * ld + i]);
        got_res.push_back(r2[r * ld + i]);
      }
    }
    expect_close(got_out, ref_out, 1e-2, 1e-2, "rmsnorm out", seed);
    expect_close(got_res, ref_res, 1e-5, 1e-6, "rmsnorm residual", seed);
    EXPECT_TRUE(d_out.sentinel_intact());
    EXPECT_TRUE(d_res.sentinel_intact());
  }
}

TEST_F(cuda_elementwise, rope_rotates_q_and_appends_rotated_k_and_v) {
  for (const int d : {64, 128}) {
    const unsigned seed = 20u + unsigned(d);
    std::mt19937 rng(seed);
    const int nh = 8, nkv = 2, slots = 3;
    const std::int64_t tokens = 5, cap = 300, ld = (nh + 2 * nkv) * d + 8;
    auto qkv = round_bf16(random_values(rng, std::size_t(tokens * ld)));
    std::vector<std::int32_t> slot = {2, 0, 2, 1, 0}, pos = {0, 17, 1, 299, 3};
    std::vector<float> inv(static_cast<std::size_t>(d / 2));
    for (int i = 0; i < d / 2; ++i) inv[std::size_t(i)] = float(std::pow(500000.0, -2.0 * i / d));
    const std::size_t cache_n = std::size_t(slots) * nkv * std::size_t(cap) * d;
    dev_array<std::uint16_t> d_qkv(*dev_, to_bf16(qkv));
    dev_array<std::uint16_t> d_k(*dev_, cache_n), d_v(*dev_, cache_n);
    dev_array<std::int32_t> d_slot(*dev_, slot), d_pos(*dev_, pos);
    dev_array<float> d_inv(*dev_, inv);
    kc::rope_append_args a;
    a.qkv = d_qkv.get();
    a.ld_qkv = ld;
    a.k_cache = d_k.get();
    a.v_cache = d_v.get();
    a.capacity = cap;
    a.slots = d_slot.get();
    a.positions = d_pos.get();
    a.inv_freq = d_inv.get();
    a.tokens = tokens;
    a.n_heads = nh;
    a.n_kv_heads = nkv;
    a.head_dim = d;
    a.dependent = d == 128;  // a programmatic dependent launch: same results
    kc::rope_append(a, nullptr);
    const auto q_got = from_bf16(d_qkv.download());
    const auto k_got = d_k.download(), v_got = d_v.download();
    std::vector<float> gq, gk, gv;
    std::vector<double> rq, rk, rv;
    auto rot = [&](const float* x, std::int32_t p, int i) {
      const double ang = double(float(p) * inv[std::size_t(i % (d / 2))]);
      const int j = i % (d / 2);
      return i < d / 2 ? x[j] * std::cos(ang) - x[j + d / 2] * std::sin(ang)
                       : x[j + d / 2] * std::cos(ang) + x[j] * std::sin(ang);
    };
    std::vector<bool> written(cache_n, false);
    for (std::int64_t t = 0; t < tokens; ++t) {
      const float* row = qkv.data() + t * ld;
      for (int h = 0; h < nh; ++h)
        for (int i = 0; i < d; ++i) {
          gq.push_back(q_got[std::size_t(t * ld + h * d + i)]);
          rq.push_back(rot(row + h * d, pos[std::size_t(t)], i));
        }
      for (int h = 0; h < nkv; ++h)
        for (int i = 0; i < d; ++i) {
          const std::size_t at = ((std::size_t(slot[std::size_t(t)]) * nkv + h) * std::size_t(cap) + std::size_t(pos[std::size_t(t)])) * d + i;
          written[at] = true;
          gk.push_back(bf16_to_f32(k_got[at]));
          rk.push_back(rot(row + (nh + h) * d, pos[std::size_t(t)], i));
          gv.push_back(bf16_to_f32(v_got[at]));
          rv.push_back(row[(nh + nkv + h) * d + i]);
        }
      for (int i = nh * d; i < ld; ++i)  // k, v and padding of the row are left alone
        if (q_got[std::size_t(t * ld + i)] != qkv[std::size_t(t * ld + i)] &&
            !(std::isnan(q_got[std::size_t(t * ld + i)]) && std::isnan(qkv[std::size_t(t * ld + i)])))
          ADD_FAILURE() << "qkv element " << i << " of token " << t << " changed";
    }
    expect_close(gq, rq, 2e-2, 1e-2, "rope q", seed);
    expect_close(gk, rk, 2e-2, 1e-2, "rope k in cache", seed);
    expect_close(gv, rv, 0, 0, "v in cache", seed);
    std::size_t stray = 0;
    for (std::size_t i = 0; i < cache_n; ++i)
      if (!written[i] && (k_got[i] != 0xffff || v_got[i] != 0xffff)) ++stray;
    EXPECT_EQ(stray, 0u) << "cache elements written outside the appended rows";
    EXPECT_TRUE(d_k.sentinel_intact() && d_v.sentinel_intact());
  }
}

TEST_F(cuda_elementwise, swiglu_vector_and_scalar_paths) {
  for (const std::int64_t inter : {1024, 1003}) {
    const unsigned seed = unsigned(inter);
    std::mt19937 rng(seed);
    const std::int64_t rows = 3, ld_out = inter + (inter % 8 ? 1 : 8);
    auto gu = round_bf16(random_values(rng, std::size_t(rows * 2 * inter)));
    dev_array<std::uint16_t> d_gu(*dev_, to_bf16(gu)), d_out(*dev_, std::size_t(rows * ld_out));
    kc::swiglu(d_gu.get(), 2 * inter, d_out.get(), ld_out, rows, inter, nullptr);
    const auto out = from_bf16(d_out.download());
    std::vector<float> got;
    std::vector<double> ref;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = 0; i < inter; ++i) {
        const double g = gu[std::size_t(r * 2 * inter + i)], u = gu[std::size_t(r * 2 * inter + inter + i)];
        ref.push_back(g / (1 + std::exp(-g)) * u);
        got.push_back(out[std::size_t(r * ld_out + i)]);
      }
    expect_close(got, ref, 1e-2, 1e-2, "swiglu", seed);
    EXPECT_TRUE(d_out.sentinel_intact());
  }
}

TEST_F(cuda_elementwise, embedding_gathers_rows_and_poisons_bad_ids) {
  std::mt19937 rng(5);
  const std::int64_t vocab = 37, hidden = 130;
  auto table = round_bf16(random_values(rng, std::size_t(vocab * hidden)));
  std::vector<std::int32_t> ids = {36, 0, 5, 5, -1, 37};
  dev_array<std::uint16_t> d_t(*dev_, to_bf16(table));
  dev_array<std::int32_t> d_ids(*dev_, ids);
  dev_array<float> d_out(*dev_, ids.size() * std::size_t(hidden));
  kc::embedding(d_t.get(), vocab, hidden, d_ids.get(), std::int64_t(ids.size()), d_out.get(), hidden, nullptr);
  const auto out = d_out.download();
  for (std::size_t t = 0; t < ids.size(); ++t)
    for (std::int64_t i = 0; i < hidden; ++i) {
      const float v = out[t * std::size_t(hidden) + std::size_t(i)];
      if (ids[t] >= 0 && ids[t] < vocab) ASSERT_EQ(v, table[std::size_t(ids[t] * hidden + i)]);
      else ASSERT_TRUE(std::isnan(v)) << "bad id " << ids[t] << " must give NaN";
    }
  EXPECT_TRUE(d_out.sentinel_intact());
}

TEST_F(cuda_elementwise, conversions_round_to_nearest_even_and_fill_is_in_range) {
  std::mt19937 rng(9);
  auto v = random_values(rng, 1001, 1e4f);
  std::vector<std::uint16_t> f16(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) f16[i] = f32_to_f16(v[i]);
  dev_array<float> d_f32(*dev_, v);
  dev_array<std::uint16_t> d_f16(*dev_, f16), d_bf(*dev_, v.size());
  dev_array<float> d_back(*dev_, v.size());
  kc::convert_to_bf16(d_f32.get(), 0, d_bf.get(), std::int64_t(v.size()), nullptr);
  kc::convert_to_f32(d_f16.get(), 1, d_back.get(), std::int64_t(v.size()), nullptr);
  const auto bf = d_bf.download();
  const auto back = d_back.download();
  for (std::size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(bf[i], f32_to_bf16(v[i])) << "element " << i;
    ASSERT_EQ(back[i], f16_to_f32(f16[i])) << "element " << i;
  }
  EXPECT_TRUE(d_bf.sentinel_intact() && d_back.sentinel_intact());
  dev_array<std::uint16_t> d_fill(*dev_, 100000);
  kc::fill_uniform_bf16(d_fill.get(), 100000, -0.5f, 0.25f, 42, nullptr);
  const auto f = from_bf16(d_fill.download());
  double mean = 0;
  for (float x : f) {
    ASSERT_TRUE(x >= -0.5f && x <= 0.25f) << x;
    mean += x / 100000.0;
  }
  EXPECT_NEAR(mean, -0.125, 0.01);
  EXPECT_TRUE(d_fill.sentinel_intact());
}
#else
TEST_F(cuda_elementwise, skipped_without_cuda) {}
#endif

}  // namespace
}  // namespace specpipe::test
