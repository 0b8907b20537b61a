#pragma once
// Straightforward references for the quantized KV formats, written from the
// formulas (DESIGN.md, memory/kv_layout.hpp) and independent of the kernels:
// per-group min/max -> f16 scale/zero -> codes, bit-by-bit packing, and the
// dequantized f32 copy a test compares attention against.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/quantized_attention.hpp"
#include "memory/dtype.hpp"

namespace specpipe::test {

enum class ref_rule { rtn, specache, hier };

struct ref_group {
  float scale = 0, zero = 0;        // f16-rounded, as stored
  std::uint16_t scale16 = 0, zero16 = 0;
  std::vector<unsigned> upper, lower;  // lower: hier only, stored +8
};

inline ref_group ref_quantize(const std::vector<float>& x, int bits, ref_rule rule) {
  const float lo = *std::min_element(x.begin(), x.end());
  const float hi = *std::max_element(x.begin(), x.end());
  const int levels = (1 << bits) - 1;
  ref_group g;
  const float s = rule == ref_rule::specache ? (hi - lo) / 2 : (hi - lo) / float(levels);
  const float z = rule == ref_rule::specache ? (3 * lo + hi) / 4 : lo;
  g.scale16 = f32_to_f16(s);
  g.zero16 = f32_to_f16(z);
  g.scale = f16_to_f32(g.scale16);
  g.zero = f16_to_f32(g.zero16);
  for (float v : x) {
    float u = g.scale > 0 ? std::nearbyint((v - g.zero) / g.scale) : 0.0f;
    u = std::min(std::max(u, 0.0f), float(levels));
    g.upper.push_back(unsigned(u));
    if (rule == ref_rule::hier) {
      const float r = v - (g.zero + u * g.scale);
      float l = g.scale > 0 ? std::nearbyint(r / (g.scale / 16)) : 0.0f;
      l = std::min(std::max(l, -8.0f), 7.0f);
      g.lower.push_back(unsigned(l + 8));
    }
  }
  return g;
}

// Bit-by-bit little-endian packing of `codes` (b bits each) at code index `first`.
inline void ref_pack(std::vector<std::uint8_t>& bytes, std::size_t byte0, const std::vector<unsigned>& codes,
                     std::int64_t first, int bits) {
  for (std::size_t i = 0; i < codes.size(); ++i)
    for (int k = 0; k < bits; ++k) {
      const std::int64_t bit = (first + std::int64_t(i)) * bits + k;
      if ((codes[i] >> k) & 1u) bytes[byte0 + std::size_t(bit / 8)] |= std::uint8_t(1u << (bit % 8));
    }
}

inline unsigned ref_unpack(const std::uint8_t* bytes, std::int64_t i, int bits) {
  unsigned c = 0;
  for (int k = 0; k < bits; ++k) {
    const std::int64_t bit = i * bits + k;
    c |= unsigned((bytes[bit / 8] >> (bit % 8)) & 1) << k;
  }
  return c;
}

// The dequantized f32 copy of a packed part, [n_tokens, n_kv_heads, head_dim].
inline std::vector<float> ref_dequantize_keys(const kernels::cpu::packed_kv& p, std::int64_t heads, std::int64_t d) {
  std::vector<float> out(std::size_t(p.n_tokens * heads * d));
  const std::int64_t chan = p.group * p.bits / 8;
  for (std::int64_t g = 0; g < p.n_tokens / p.group; ++g)
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t blk = g * heads + h;
      for (std::int64_t c = 0; c < d; ++c) {
        const float s = f16_to_f32(p.k_scale[blk * d + c]), z = f16_to_f32(p.k_zero[blk * d + c]);
        for (std::int64_t t = 0; t < p.group; ++t) {
          float x = z + float(ref_unpack(p.k_codes + blk * d * chan + c * chan, t, p.bits)) * s;
          if (p.k_lower) x += (float(ref_unpack(p.k_lower + blk * d * chan + c * chan, t, 4)) - 8) * s / 16;
          out[std::size_t(((g * p.group + t) * heads + h) * d + c)] = x;
        }
      }
    }
  return out;
}

inline std::vector<float> ref_dequantize_values(const kernels::cpu::packed_kv& p, std::int64_t heads, std::int64_t d) {
  std::vector<float> out(std::size_t(p.n_tokens * heads * d));
  const std::int64_t row = (d * p.bits + 7) / 8, groups = (d + p.value_group - 1) / p.value_group;
  for (std::int64_t t = 0; t < p.n_tokens; ++t)
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t r = t * heads + h;
      for (std::int64_t c = 0; c < d; ++c) {
        const std::int64_t g = c / p.value_group;
        const float s = f16_to_f32(p.v_scale[r * groups + g]), z = f16_to_f32(p.v_zero[r * groups + g]);
        float x = z + float(ref_unpack(p.v_codes + r * row, c, p.bits)) * s;
        if (p.v_lower) x += (float(ref_unpack(p.v_lower + r * row, c, 4)) - 8) * s / 16;
        out[std::size_t(r * d + c)] = x;
      }
    }
  return out;
}

}  // namespace specpipe::test
