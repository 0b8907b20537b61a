#pragma once
// Quantize-and-pack of KV rows into the layouts of memory/kv_layout.hpp.
// Pure functions over raw pointers and strides; no allocation. The caller
// zeroes nothing: every output byte of the given extent is written.
//
// Rounding is round-half-to-even (rintf, as CUDA's __float2int_rn), and codes
// are computed against the f16-rounded scale and zero that are stored, so
// x^ = zero16 + code * scale16 is exactly what a reader reconstructs.
#include <cstdint>

namespace specpipe::kernels::cpu {

// How the levels of a group are placed.
enum class quant_rule : std::uint8_t {
  rtn,       // KIVI: zero = min, scale = (max - min) / (2^b - 1)
  specache,  // SpeCache 1-bit: zero = (3 min + max) / 4, scale = (max - min) / 2
  hier,      // QuantSpec: 4-bit upper plane (zero = min, scale = (max-min)/15) + 4-bit residual plane
};

struct quant_out {
  std::uint8_t* codes = nullptr;  // upper (or only) plane
  std::uint8_t* lower = nullptr;  // hier only: the residual plane, same layout as codes
  std::uint16_t* scale = nullptr;  // f16
  std::uint16_t* zero = nullptr;   // f16
};

// Keys of one (group, KV head): x is `tokens` rows of head_dim floats, row r
// at x + r * x_stride. Quantizes each channel over the rows (per-channel keys,
// KIVI sec. 3) and writes a key block: channel c's codes at
// out.codes + c * (tokens * bits / 8); scale/zero [head_dim]. tokens*bits % 8 == 0.
void quantize_key_group(const float* x, std::int64_t x_stride, std::int64_t tokens, std::int64_t head_dim,
                        int bits, quant_rule rule, const quant_out& out);

// Values of `tokens` rows (row r at x + r * x_stride), each quantized per
// token over groups of value_group channels. Row r's codes go to
// out.codes + r * codes_stride (ceil(head_dim*bits/8) bytes), its scales and
// zeros to out.scale/zero + r * scale_stride (ceil(head_dim/value_group) each).
void quantize_value_rows(const float* x, std::int64_t x_stride, std::int64_t tokens, std::int64_t head_dim,
                         std::int64_t value_group, int bits, quant_rule rule, const quant_out& out,
                         std::int64_t codes_stride, std::int64_t scale_stride);

}  // namespace specpipe::kernels::cpu
