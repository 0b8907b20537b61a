#pragma once
// Weight-only 4-bit linear layers: QuantSpec's draft multiplies by 4-bit
// group-quantized copies of the target's projections (Tiwari et al. 2025,
// sec. 4.2 and 5: "4-bit weights, group size 128").
//
// Format. W [out, in] is cut along the input dimension into groups of `group`
// columns (the last group may be shorter); each (row, group) is quantized
// asymmetrically with round to nearest:
//   zero z = min, scale s = (max - min) / 15, code q = round((w - z) / s) in [0, 15]
//   w^ = z + s * q
// Why this one: it is the scheme the paper's draft uses (plain RTN, the
// cheapest to build and the same rule as the KV cache's upper nibble, DESIGN.md);
// asymmetric levels spend none of the 16 codes on a side of zero a group does
// not reach, and g = 128 keeps a group's range narrow enough that outlier
// rows do not flatten their neighbours. It needs no calibration data, unlike
// GPTQ/AWQ, which would only raise the draft's acceptance further.
// z and s are stored as f16 beside the codes; s is rounded up and z down to
// the next f16 so that the 16 levels still cover [min, max]: every element's
// error is then at most s/2 (of the stored s), which the tests check.
//
// Packing, chosen for a GEMV that streams each row once: codes of row r at
// codes + r * code_stride, column c in byte c / 2, even columns in the low
// nibble and odd ones in the high nibble; code_stride is (in + 1) / 2 rounded
// up to 16 bytes so a GPU lane can load any row with aligned 16-byte loads.
// Scales and zeros are f16 [out][groups].
#include <cstddef>
#include <cstdint>
#include <vector>

#include "memory/dtype.hpp"

namespace specpipe::kernels::cpu {

class thread_pool;

// Bytes of one packed row's codes (the padded stride).
std::int64_t int4_code_stride(std::int64_t in);

// A packed matrix in host or device memory (not owned).
struct int4_matrix {
  const std::uint8_t* codes = nullptr;   // [out][code_stride] bytes
  const std::uint16_t* scale = nullptr;  // [out][groups] f16
  const std::uint16_t* zero = nullptr;   // [out][groups] f16
  std::int64_t out = 0;
  std::int64_t in = 0;
  std::int64_t group = 128;
  std::int64_t code_stride = 0;

  bool empty() const { return codes == nullptr; }
  std::int64_t groups() const { return (in + group - 1) / group; }
};

// Bytes a packed [out, in] matrix takes: codes (padded rows) plus f16 scale
// and zero per (row, group).
std::size_t int4_bytes(std::int64_t out, std::int64_t in, std::int64_t group);

// An owning host copy.
struct int4_weights {
  std::int64_t out = 0, in = 0, group = 128, code_stride = 0;
  std::vector<std::uint8_t> codes;
  std::vector<std::uint16_t> scale, zero;

  int4_matrix view() const;
  std::size_t bytes() const { return codes.size() + 2 * (scale.size() + zero.size()); }
};

// Quantizes W [out, in] (f32, f16 or bf16, row stride w_stride elements; 0
// means `in`) as described above, rows in parallel on `pool`. group must be
// even and positive. Throws std::invalid_argument naming what is wrong.
int4_weights quantize_int4(const void* w, dtype w_type, std::int64_t out, std::int64_t in, std::int64_t w_stride,
                           std::int64_t group, thread_pool* pool = nullptr);

// Row `row` of the dequantized matrix, z + s * q in f32 (in floats).
void dequantize_int4_row(const int4_matrix& m, std::int64_t row, float* out);

struct int4_linear_args {
  const float* x = nullptr;   // [n, in], row stride x_stride
  std::int64_t x_stride = 0;  // elements; 0 means `in`
  int4_matrix w;              // host memory
  float* y = nullptr;         // [n, out], row stride y_stride
  std::int64_t y_stride = 0;  // elements; 0 means `out`
  std::int64_t n = 0;
};

// y = x * W^^T over the packed codes, dequantization fused: per group,
// y += z * sum(x) + s * sum(x * q), so no dequantized row is ever formed.
// Parallel over output rows on `pool` (inline when null). As kernels/linear.hpp,
// each output is summed in the same order whatever n is: a token's row is
// bitwise identical alone (decode) or in a batch (verify). Throws
// std::invalid_argument on bad sizes or a malformed matrix.
void int4_linear(const int4_linear_args& a, thread_pool* pool = nullptr);

}  // namespace specpipe::kernels::cpu
