// cuda_forward on a small random model against a double-precision reference
// forward pass written here from the Llama equations (HF modeling_llama):
// chunked prefill, ragged batched decode, graph replay and GPU selection.
#include <gtest/gtest.h>

#include <cctype>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "memory/allocator.hpp"
#include "memory/dtype.hpp"
#include "model/config.hpp"
#include "model/cuda_forward.hpp"
#include "support/gpu_test.hpp"
#include "support/random_weights.hpp"

namespace specpipe {
namespace {

model_config tiny_config() {
  model_config c;
  c.model_type = "llama";
  c.vocab_size = 97;
  c.hidden_size = 128;
  c.intermediate_size = 200;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 1;
  c.head_dim = 64;
  c.max_position_embeddings = 512;
  c.rope.theta = 10000.0;
  return c;
}

// Host weights: f32 values already rounded to bf16, so the GPU model holds
// exactly the numbers the reference uses.
test::random_weights random_model(const model_config& c, unsigned seed) {
  return test::random_weights(c, seed, 0.08f, dtype::f32);
}

// One sequence, all tokens; returns logits of every position.
std::vector<std::vector<double>> reference_forward(const model_config& c, const model_weights& w,
                                                   const std::vector<std::int32_t>& toks) {
  const auto H = std::size_t(c.hidden_size), D = std::size_t(c.head_dim), I = std::size_t(c.intermediate_size);
  const auto nh = std::size_t(c.num_attention_heads), nkv = std::size_t(c.num_key_value_heads);
  auto f = [](const tensor_view& t) { return t.as<const float>(); };
  auto matvec = [](const float* W, const std::vector<double>& x, std::size_t n) {
    std::vector<double> y(n, 0.0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t k = 0; k < x.size(); ++k) y[i] += double(W[i * x.size() + k]) * x[k];
    return y;
  };
  auto norm = [&](const std::vector<double>& x, const float* g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / double(x.size()) + c.rms_norm_eps);
    std::vector<double> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * g[i];
    return y;
  };
  auto rope = [&](std::vector<double>& v, std::size_t heads, std::size_t pos) {
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < D / 2; ++i) {
        const double ang = double(pos) * std::pow(c.rope.theta, -2.0 * double(i) / double(D));
        const double a = v[h * D + i], b = v[h * D + i + D / 2];
        v[h * D + i] = a * std::cos(ang) - b * std::sin(ang);
        v[h * D + i + D / 2] = b * std::cos(ang) + a * std::sin(ang);
      }
  };
  std::vector<std::vector<std::vector<double>>> K(w.layers.size()), V(w.layers.size());
  std::vector<std::vector<double>> out;
  for (std::size_t t = 0; t < toks.size(); ++t) {
    std::vector<double> x(H);
    for (std::size_t i = 0; i < H; ++i) x[i] = f(w.embed)[std::size_t(toks[t]) * H + i];
    for (std::size_t l = 0; l < w.layers.size(); ++l) {
      const auto& L = w.layers[l];
      const auto xn = norm(x, f(L.attn_norm));
      auto q = matvec(f(L.wq), xn, nh * D), k = matvec(f(L.wk), xn, nkv * D);
      const auto v = matvec(f(L.wv), xn, nkv * D);
      rope(q, nh, t);
      rope(k, nkv, t);
      K[l].push_back(k);
      V[l].push_back(v);
      std::vector<double> att(nh * D, 0.0);
      for (std::size_t h = 0; h < nh; ++h) {
        const std::size_t kh = h / (nh / nkv);
        std::vector<double> s(t + 1);
        double mx = -INFINITY;
        for (std::size_t j = 0; j <= t; ++j) {
          double d = 0;
          for (std::size_t i = 0; i < D; ++i) d += q[h * D + i] * K[l][j][kh * D + i];
          s[j] = d / std::sqrt(double(D));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (std::size_t j = 0; j <= t; ++j)
          for (std::size_t i = 0; i < D; ++i) att[h * D + i] += s[j] / z * V[l][j][kh * D + i];
      }
      const auto o = matvec(f(L.wo), att, H);
      for (std::size_t i = 0; i < H; ++i) x[i] += o[i];
      const auto x2 = norm(x, f(L.mlp_norm));
      const auto g = matvec(f(L.w_gate), x2, I), u = matvec(f(L.w_up), x2, I);
      std::vector<double> hcat(I);
      for (std::size_t i = 0; i < I; ++i) hcat[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      const auto dn = matvec(f(L.w_down), hcat, H);
      for (std::size_t i = 0; i < H; ++i) x[i] += dn[i];
    }
    out.push_back(matvec(f(w.lm_head), norm(x, f(w.final_norm)), std::size_t(c.vocab_size)));
  }
  return out;
}

double rel_error(const float* got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

class cuda_forward_test : public test::gpu_test {};

// The decode step under every GEMV v2 switch (kernels/cuda/NOTES.md,
// version 3): defaults, v2's fused SwiGLU with 4 loads in flight, and v1's
// shape without k-split and PDL.
struct gemv_variant {
  bool fuse_swiglu, k_split;
  int unroll;
  bool overlap;
};
std::string describe(const gemv_variant& v) {
  return std::string(v.fuse_swiglu ? "fused" : "unfused") + (v.k_split ? " k-split" : " no-ksplit") + " unroll " +
         std::to_string(v.unroll) + (v.overlap ? " pdl" : " no-pdl");
}

class cuda_forward_variants : public cuda_forward_test, public ::testing::WithParamInterface<gemv_variant> {};

TEST_P(cuda_forward_variants, logits_match_reference_through_prefill_and_ragged_decode) {
  const auto c = tiny_config();
  auto host = random_model(c, 1234);
  cuda_model gpu(c, host.w, 0);
  cuda_forward_options o;
  o.fuse_swiglu = GetParam().fuse_swiglu;
  o.gemv_k_split = GetParam().k_split;
  o.gemv_unroll = GetParam().unroll;
  o.overlap_launch = GetParam().overlap;
  SCOPED_TRACE(describe(GetParam()));
  o.max_batch = 3;
  o.max_context = 200;
  o.prefill_chunk = 16;  // several chunks for the 40-token prompt
  cuda_forward fwd(gpu, o);
  std::mt19937 rng(99);
  std::vector<std::vector<std::int32_t>> seqs(3);
  const std::size_t prompt_len[3] = {40, 5, 17};
  for (int s = 0; s < 3; ++s)
    for (std::size_t i = 0; i < prompt_len[s] + 6; ++i) seqs[std::size_t(s)].push_back(std::int32_t(rng() % 97));
  std::vector<std::vector<std::vector<double>>> ref;
  for (auto& s : seqs) ref.push_back(reference_forward(c, host.w, s));

  std::vector<float> logits(std::size_t(3 * c.vocab_size));
  for (int s = 0; s < 3; ++s) {
    fwd.prefill(s, std::span(seqs[std::size_t(s)]).first(prompt_len[s]), logits);
    EXPECT_LE(rel_error(logits.data(), ref[std::size_t(s)][prompt_len[s] - 1]), 2e-2) << "prefill of slot " << s;
    EXPECT_EQ(fwd.length(s), std::int64_t(prompt_len[s]));
  }
  // Six decode steps of all three (steps 2+ replay the captured graph).
  for (std::size_t step = 0; step < 6; ++step) {
    const std::vector<int> slots = {2, 0, 1};
    std::vector<std::int32_t> toks;
    for (int s : slots) toks.push_back(seqs[std::size_t(s)][prompt_len[s] + step]);
    fwd.decode(slots, toks, logits);
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const int s = slots[i];
      EXPECT_LE(rel_error(logits.data() + i * std::size_t(c.vocab_size), ref[std::size_t(s)][prompt_len[s] + step]),
                2e-2)
          << "decode step " << step << " slot " << s;
    }
    // Greedy selection on the GPU agrees with the host argmax of the same logits.
    std::vector<std::int32_t> picked(3);
    fwd.select(sampling_params{0.f, 1.f, 0, 0}, step, picked);
    for (std::size_t i = 0; i < 3; ++i) {
      const float* row = logits.data() + i * std::size_t(c.vocab_size);
      EXPECT_EQ(picked[i], std::int32_t(std::max_element(row, row + c.vocab_size) - row));
    }
  }
  // A batch of one after the others, and truncation as rollback.
  fwd.truncate(1, 3);
  const std::vector<int> one = {1};
  const std::vector<std::int32_t> tok = {seqs[1][3]};
  fwd.decode(one, tok, logits);
  EXPECT_LE(rel_error(logits.data(), ref[1][3]), 2e-2);
}

INSTANTIATE_TEST_SUITE_P(gemv, cuda_forward_variants,
                         ::testing::Values(gemv_variant{false, true, kernels::cuda::gemv_default_unroll, true},
                                           gemv_variant{true, true, 4, true}, gemv_variant{false, false, 2, false},
                                           gemv_variant{true, false, 2, true}),
                         // Readable, stable test names (the default prints the struct's bytes, padding included).
                         [](const ::testing::TestParamInfo<gemv_variant>& i) {
                           std::string n = describe(i.param);
                           for (auto& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST_F(cuda_forward_test, rejects_bad_requests) {
  const auto c = tiny_config();
  auto host = random_model(c, 5);
  cuda_model gpu(c, host.w, 0);
  cuda_forward_options o;
  o.max_batch = 2;
  o.max_context = 8;
  cuda_forward fwd(gpu, o);
  const std::vector<std::int32_t> too_long(9, 1), bad_id = {97};
  EXPECT_THROW(fwd.prefill(0, too_long), std::invalid_argument);
  EXPECT_THROW(fwd.prefill(0, bad_id), std::invalid_argument);
  EXPECT_THROW(fwd.prefill(2, std::vector<std::int32_t>{1}), std::out_of_range);
  const std::vector<int> twice = {0, 0};
  const std::vector<std::int32_t> two = {1, 2};
  EXPECT_THROW(fwd.decode(twice, two), std::invalid_argument);
  o.gemv_unroll = 3;
  EXPECT_THROW(cuda_forward(gpu, o).synchronize(), std::invalid_argument);
}

TEST_F(cuda_forward_test, random_model_runs_and_sizes_add_up) {
  auto c = tiny_config();
  auto gpu = cuda_model::random(c, 7);
  cuda_forward_options o;
  o.max_batch = 2;
  o.max_context = 300;
  cuda_forward fwd(gpu, o);
  fwd.fill_random_kv(0, 250, 1);
  fwd.fill_random_kv(1, 3, 2);
  std::vector<float> logits(std::size_t(2 * c.vocab_size));
  const std::vector<int> slots = {0, 1};
  const std::vector<std::int32_t> toks = {1, 2};
  for (int i = 0; i < 3; ++i) fwd.decode(slots, toks, logits);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(fwd.length(0), 253);
  EXPECT_EQ(cuda_forward::kv_bytes_per_token(c), std::size_t(2 * 2 * 64 * 2));
}

}  // namespace
}  // namespace specpipe
