// CUDA decode attention over packed codes against the CPU quantized attention
// on the same bytes: every format and read (KIVI 1/2/4-bit, SpeCache 1-bit,
// hier INT4 and INT8), GQA 4 and 8, head_dim 64 and 128, G 32 and 64, windows
// of odd lengths, several sequences per batch and several split counts.
// Outputs start as NaN and carry a poisoned sentinel tail.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda_test_util.hpp"
#include "kernels/quant_packed_fixture.hpp"
#include "kernels/quant_format_cases.hpp"
#include "kernels/quantized_attention.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/quantized_attention.hpp"
#endif

namespace specpipe::test {
namespace {

class cuda_quant_attention : public cuda_test {};

#ifdef SPECPIPE_HAVE_CUDA
namespace kcpu = kernels::cpu;
namespace kc = kernels::cuda;

template <class T>
void append(std::vector<T>& dst, const std::vector<T>& src) {
  dst.insert(dst.end(), src.begin(), src.end());
}

// Builds `batch` packed sequences on the CPU, runs the CUDA kernel over their
// concatenation and the CPU kernel over each, and compares.
void check_case(allocator& dev, const format_case& fc, int d, int kv_heads, int gq, int group, int groups, int window,
                int batch, const std::vector<int>& split_counts, unsigned seed) {
  const std::string what = std::string(fc.name) + " d=" + std::to_string(d) + " gqa=" + std::to_string(gq) +
                           " G=" + std::to_string(group) + " quant=" + std::to_string(group * groups) +
                           " window=" + std::to_string(window);
  SCOPED_TRACE(what);
  const int heads = kv_heads * gq;
  std::vector<packed_fixture> seqs(static_cast<std::size_t>(batch));
  std::vector<std::uint8_t> kc_all, kl_all, vc_all, vl_all;
  std::vector<std::uint16_t> ks_all, kz_all, vs_all, vz_all, wk_all, wv_all;
  std::mt19937 rng(seed);
  const std::vector<float> q = round_bf16(random_values(rng, std::size_t(batch) * heads * d, 3.f));
  std::vector<double> ref;
  for (int b = 0; b < batch; ++b) {
    packed_fixture& f = seqs[std::size_t(b)];
    f.heads = heads;
    f.kv_heads = kv_heads;
    f.d = d;
    f.group = group;
    f.groups = groups;
    f.window = window;
    f.bits = fc.bits;
    f.rule = fc.rule;
    f.read_lower = fc.read_lower;
    f.build(seed * 7919u + unsigned(b));
    // The GPU window is bf16: both sides read the bf16-rounded rows.
    const std::size_t at = std::size_t(f.quantized() * kv_heads * d);
    for (std::size_t i = at; i < f.k.size(); ++i) {
      f.k[i] = bf16_to_f32(f32_to_bf16(f.k[i]));
      f.v[i] = bf16_to_f32(f32_to_bf16(f.v[i]));
    }
    append(kc_all, f.k_codes);
    append(kl_all, f.k_lower);
    append(vc_all, f.v_codes);
    append(vl_all, f.v_lower);
    append(ks_all, f.k_scale);
    append(kz_all, f.k_zero);
    append(vs_all, f.v_scale);
    append(vz_all, f.v_zero);
    append(wk_all, to_bf16(std::vector<float>(f.k.begin() + std::ptrdiff_t(at), f.k.end())));
    append(wv_all, to_bf16(std::vector<float>(f.v.begin() + std::ptrdiff_t(at), f.v.end())));
    std::vector<float> out(std::size_t(heads) * d);
    const float* qb = q.data() + std::size_t(b) * heads * d;
    kcpu::quantized_attention(f.args(qb, 1, f.len() - 1, out.data()));
    for (float x : out) ref.push_back(double(x));
  }
  const bool hier = fc.rule == kcpu::quant_rule::hier;
  dev_array<std::uint8_t> kc(dev, kc_all), vc(dev, vc_all);
  dev_array<std::uint8_t> kl(dev, hier ? kl_all : std::vector<std::uint8_t>(16)),
      vl(dev, hier ? vl_all : std::vector<std::uint8_t>(16));
  dev_array<std::uint16_t> ks(dev, ks_all), kz(dev, kz_all), vs(dev, vs_all), vz(dev, vz_all);
  dev_array<std::uint16_t> wk(dev, wk_all), wv(dev, wv_all), qd(dev, to_bf16(q));
  const int max_splits = 16;
  dev_array<float> part(dev, kc::quant_decode_attention_scratch_floats(batch, heads, d, max_splits));
  for (const int splits : split_counts) {
    SCOPED_TRACE("splits=" + std::to_string(splits));
    dev_array<float> out(dev, std::size_t(batch) * heads * d);  // 0xff bytes: NaN until written
    kc::quant_decode_args a;
    a.q = qd.get();
    a.bits = fc.bits;
    a.group = group;
    a.value_group = std::min(group, d);
    a.n_quant = std::int64_t(group) * groups;
    a.win_len = window;
    a.k_codes = kc.get();
    a.v_codes = vc.get();
    if (fc.read_lower) {
      a.k_lower = kl.get();
      a.v_lower = vl.get();
    }
    a.k_scale = ks.get();
    a.k_zero = kz.get();
    a.v_scale = vs.get();
    a.v_zero = vz.get();
    a.win_k = wk.get();
    a.win_v = wv.get();
    a.out_f32 = out.get();
    a.partial = part.get();
    a.batch = batch;
    a.n_heads = heads;
    a.n_kv_heads = kv_heads;
    a.head_dim = d;
    a.splits = splits;
    a.scale = 1.f / std::sqrt(float(d));
    kc::quant_decode_attention(a, nullptr);
    expect_close(out.download(), ref, 2e-3, 2e-3, what + " splits=" + std::to_string(splits), seed);
    EXPECT_TRUE(out.sentinel_intact()) << "write past the output";
  }
}

TEST_F(cuda_quant_attention, matches_cpu_on_the_same_packed_bytes) {
  unsigned seed = 900;
  for (const auto& fc : formats)
    for (const int gq : {4, 8}) {
      check_case(*dev_, fc, 128, 2, gq, 64, 5, 37, 3, {1, 3, 7}, ++seed);
      check_case(*dev_, fc, 64, 3, gq, 32, 7, 21, 2, {2, 5}, ++seed);
    }
}

TEST_F(cuda_quant_attention, window_only_and_packed_only) {
  unsigned seed = 950;
  for (const auto& fc : formats) {
    check_case(*dev_, fc, 128, 2, 4, 64, 0, 45, 2, {1, 2}, ++seed);  // nothing packed yet
    check_case(*dev_, fc, 128, 2, 8, 64, 3, 1, 2, {1, 4}, ++seed);   // one window row
    check_case(*dev_, fc, 64, 1, 1, 8, 40, 0, 2, {3}, ++seed);       // smallest groups, no window
  }
}

TEST_F(cuda_quant_attention, rejects_bad_arguments) {
  kc::quant_decode_args a;
  a.batch = 1;
  a.n_heads = 8;
  a.n_kv_heads = 2;
  a.head_dim = 96;
  EXPECT_THROW(kc::quant_decode_attention(a, nullptr), std::invalid_argument);
  a.head_dim = 128;
  a.group = 48;
  EXPECT_THROW(kc::quant_decode_attention(a, nullptr), std::invalid_argument);
  a.group = 64;
  a.bits = 3;
  EXPECT_THROW(kc::quant_decode_attention(a, nullptr), std::invalid_argument);
}
#endif

TEST_F(cuda_quant_attention, split_choice_fills_the_machine) {
#ifdef SPECPIPE_HAVE_CUDA
  // 64k tokens at G=64: 512 packed tiles + 2 window tiles per (sequence, head).
  const int s = kc::quant_decode_attention_splits(8, 8, 65472, 64, 132, 128, 4);
  EXPECT_GE(s, 1);
  EXPECT_LE(s, 128);
  EXPECT_GE(64 * s, 132 * 4 * 9 / 10) << "fewer blocks than the slots of one wave";
#endif
}

}  // namespace
}  // namespace specpipe::test
