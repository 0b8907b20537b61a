#pragma once
// A packed KV history built with the quantize kernels, its dequantized copy
// (from tests/kernels/quant_reference.hpp) and a full-precision window: the
// input of the quantized, mixed attention and top-k tests.
#include <random>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/quant_reference.hpp"
#include "kernels/quantize.hpp"
#include "support/test_util.hpp"

namespace specpipe::test {

struct packed_fixture {
  std::int64_t heads = 6, kv_heads = 2, d = 80, group = 32, groups = 3, window = 21;
  int bits = 2;
  kernels::cpu::quant_rule rule = kernels::cpu::quant_rule::rtn;
  bool read_lower = false;

  std::vector<float> k, v;  // the original rows, [len, kv_heads, d]
  std::vector<std::uint8_t> k_codes, k_lower, v_codes, v_lower;
  std::vector<std::uint16_t> k_scale, k_zero, v_scale, v_zero;

  std::int64_t quantized() const { return group * groups; }
  std::int64_t len() const { return quantized() + window; }
  std::int64_t value_group() const { return std::min(group, d); }

  void build(std::uint64_t seed) {
    namespace kc = kernels::cpu;
    std::mt19937_64 rng(seed);
    const std::int64_t kvd = kv_heads * d;
    k = random_floats(rng, std::size_t(len() * kvd), -1.0f, 1.0f, 0.02);
    v = random_floats(rng, std::size_t(len() * kvd), -1.0f, 1.0f, 0.02);
    for (std::int64_t t = 0; t < len(); ++t) k[std::size_t(t * kvd + 5)] *= 15.0f;  // outlier key channel
    const bool hier = rule == kc::quant_rule::hier;
    const std::int64_t block = d * group * bits / 8, row = (d * bits + 7) / 8;
    const std::int64_t vg = (d + value_group() - 1) / value_group();
    k_codes.assign(std::size_t(groups * kv_heads * block), 0);
    k_lower.assign(hier ? k_codes.size() : 0, 0);
    k_scale.assign(std::size_t(groups * kv_heads * d), 0);
    k_zero = k_scale;
    v_codes.assign(std::size_t(quantized() * kv_heads * row), 0);
    v_lower.assign(hier ? v_codes.size() : 0, 0);
    v_scale.assign(std::size_t(quantized() * kv_heads * vg), 0);
    v_zero = v_scale;
    for (std::int64_t g = 0; g < groups; ++g)
      for (std::int64_t h = 0; h < kv_heads; ++h) {
        const std::int64_t b = g * kv_heads + h;
        kc::quantize_key_group(k.data() + g * group * kvd + h * d, kvd, group, d, bits, rule,
                               {k_codes.data() + b * block, hier ? k_lower.data() + b * block : nullptr,
                                k_scale.data() + b * d, k_zero.data() + b * d});
      }
    // Nothing packed yet (a window-only cache): no value rows to quantize, and
    // the empty planes have no storage to hand over.
    for (std::int64_t h = 0; h < kv_heads && quantized() > 0; ++h)
      kc::quantize_value_rows(v.data() + h * d, kvd, quantized(), d, value_group(), bits, rule,
                              {v_codes.data() + h * row, hier ? v_lower.data() + h * row : nullptr,
                               v_scale.data() + h * vg, v_zero.data() + h * vg},
                              kv_heads * row, kv_heads * vg);
  }

  kernels::cpu::packed_kv packed() const {
    kernels::cpu::packed_kv p;
    p.bits = bits;
    p.group = group;
    p.value_group = value_group();
    p.n_tokens = quantized();
    p.k_codes = k_codes.data();
    p.k_scale = k_scale.data();
    p.k_zero = k_zero.data();
    p.v_codes = v_codes.data();
    p.v_scale = v_scale.data();
    p.v_zero = v_zero.data();
    if (read_lower) {
      p.k_lower = k_lower.data();
      p.v_lower = v_lower.data();
    }
    return p;
  }

  // The dequantized history followed by the window rows: what attention over
  // the packed cache must equal.
  void dequantized(std::vector<float>& dk, std::vector<float>& dv) const {
    dk = ref_dequantize_keys(packed(), kv_heads, d);
    dv = ref_dequantize_values(packed(), kv_heads, d);
    const std::size_t at = std::size_t(quantized() * kv_heads * d);
    dk.insert(dk.end(), k.begin() + std::ptrdiff_t(at), k.end());
    dv.insert(dv.end(), v.begin() + std::ptrdiff_t(at), v.end());
  }

  kernels::cpu::quantized_attention_args args(const float* q, std::int64_t n, std::int64_t pos0, float* out) const {
    kernels::cpu::quantized_attention_args a;
    a.q = q;
    a.out = out;
    a.n = n;
    a.pos0 = pos0;
    a.n_heads = heads;
    a.n_kv_heads = kv_heads;
    a.head_dim = d;
    a.kv = packed();
    const std::size_t at = std::size_t(quantized() * kv_heads * d);
    a.win_k = k.data() + at;
    a.win_v = v.data() + at;
    a.win_len = window;
    return a;
  }
};

// Full-precision attention of the fixture's shape over the given K/V
// ([len, kv_heads, d] f32): the exact answer the quantized kernels approximate.
inline std::vector<float> full_attention(const packed_fixture& f, const std::vector<float>& k,
                                         const std::vector<float>& v, const std::vector<float>& q, std::int64_t n,
                                         std::int64_t pos0) {
  std::vector<float> out(std::size_t(n * f.heads * f.d));
  kernels::cpu::attention_args a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.len = f.len();
  a.out = out.data();
  a.n = n;
  a.pos0 = pos0;
  a.n_heads = f.heads;
  a.n_kv_heads = f.kv_heads;
  a.head_dim = f.d;
  kernels::cpu::attention(a);
  return out;
}

}  // namespace specpipe::test
