#include "kernels/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "memory/dtype.hpp"

namespace specpipe::kernels::cpu {

namespace {

void check_bits(int bits, quant_rule rule) {
  const bool ok = rule == quant_rule::rtn        ? (bits == 1 || bits == 2 || bits == 4)
                  : rule == quant_rule::specache ? bits == 1
                                                 : bits == 4;
  if (!ok) throw std::invalid_argument("quantize: " + std::to_string(bits) + " bits do not fit the rule");
}

// Quantizes the n values x[i * stride] into codes [first, first + n) of the
// bit stream(s), and stores the group's f16 scale and zero.
void quantize_run(const float* x, std::int64_t stride, std::int64_t n, int bits, quant_rule rule,
                  std::uint8_t* codes, std::uint8_t* lower, std::int64_t first, std::uint16_t* scale,
                  std::uint16_t* zero) {
  float lo = x[0], hi = x[0];
  for (std::int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, x[i * stride]);
    hi = std::max(hi, x[i * stride]);
  }
  const int levels = (1 << bits) - 1;
  float s = 0, z = 0;
  switch (rule) {
    case quant_rule::rtn:
    case quant_rule::hier:
      z = lo;
      s = (hi - lo) / float(levels);
      break;
    case quant_rule::specache:
      // The two levels at the quartiles of [min, max] (SpeCache sec. 3.2).
      z = (3 * lo + hi) / 4;
      s = (hi - lo) / 2;
      break;
  }
  *scale = f32_to_f16(s);
  *zero = f32_to_f16(z);
  const float s16 = f16_to_f32(*scale), z16 = f16_to_f32(*zero);
  // True divisions (not reciprocal products) so that ties round the same way
  // in every implementation.
  const float lower_step = s16 / 16.0f;
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i * stride];
    const float u = s16 > 0 ? std::clamp(std::rint((v - z16) / s16), 0.0f, float(levels)) : 0.0f;
    const std::int64_t bit = (first + i) * bits;
    codes[bit >> 3] |= std::uint8_t(unsigned(u) << (bit & 7));
    if (lower) {
      // QuantSpec's residual plane: r = x - (min + U s), L = clamp(round(r / (s/16)), -8, 7) + 8.
      const float r = v - (z16 + u * s16);
      const float l = (s16 > 0 ? std::clamp(std::rint(r / lower_step), -8.0f, 7.0f) : 0.0f) + 8.0f;
      lower[bit >> 3] |= std::uint8_t(unsigned(l) << (bit & 7));
    }
  }
}

}  // namespace

void quantize_key_group(const float* x, std::int64_t x_stride, std::int64_t tokens, std::int64_t head_dim,
                        int bits, quant_rule rule, const quant_out& out) {
  check_bits(bits, rule);
  if (tokens <= 0 || (tokens * bits) % 8 != 0)
    throw std::invalid_argument("quantize_key_group: " + std::to_string(tokens) + " tokens at " +
                                std::to_string(bits) + " bits do not fill whole bytes per channel");
  if ((rule == quant_rule::hier) != (out.lower != nullptr))
    throw std::invalid_argument("quantize_key_group: the residual plane is given iff the rule is hier");
  const std::int64_t chan_bytes = tokens * bits / 8;
  std::memset(out.codes, 0, std::size_t(head_dim * chan_bytes));
  if (out.lower) std::memset(out.lower, 0, std::size_t(head_dim * chan_bytes));
  for (std::int64_t c = 0; c < head_dim; ++c)
    quantize_run(x + c, x_stride, tokens, bits, rule, out.codes + c * chan_bytes,
                 out.lower ? out.lower + c * chan_bytes : nullptr, 0, out.scale + c, out.zero + c);
}

void quantize_value_rows(const float* x, std::int64_t x_stride, std::int64_t tokens, std::int64_t head_dim,
                         std::int64_t value_group, int bits, quant_rule rule, const quant_out& out,
                         std::int64_t codes_stride, std::int64_t scale_stride) {
  check_bits(bits, rule);
  if (value_group <= 0 || head_dim <= 0)
    throw std::invalid_argument("quantize_value_rows: head_dim and value_group must be positive");
  if ((rule == quant_rule::hier) != (out.lower != nullptr))
    throw std::invalid_argument("quantize_value_rows: the residual plane is given iff the rule is hier");
  const std::int64_t row_bytes = (head_dim * bits + 7) / 8;
  const std::int64_t groups = (head_dim + value_group - 1) / value_group;
  for (std::int64_t r = 0; r < tokens; ++r) {
    std::uint8_t* codes = out.codes + r * codes_stride;
    std::uint8_t* lower = out.lower ? out.lower + r * codes_stride : nullptr;
    std::memset(codes, 0, std::size_t(row_bytes));
    if (lower) std::memset(lower, 0, std::size_t(row_bytes));
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t c0 = g * value_group, len = std::min(value_group, head_dim - c0);
      quantize_run(x + r * x_stride + c0, 1, len, bits, rule, codes, lower, c0, out.scale + r * scale_stride + g,
                   out.zero + r * scale_stride + g);
    }
  }
}

}  // namespace specpipe::kernels::cpu
