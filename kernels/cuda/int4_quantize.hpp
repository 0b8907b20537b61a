#pragma once
// Quantize-and-pack of a bf16 weight matrix already on the GPU into the 4-bit
// group format of kernels/int4_linear.hpp: the CUDA twin of
// kernels::cpu::quantize_int4 (dtype::bf16 input), so the draft's 4-bit copies
// can be built from the device-resident target weights without a round trip
// through host memory.
//
// Bit-exact with the CPU on the same bf16 values: the same first-occurrence
// min and max (which keeps the sign of a zero the CPU would keep), the same
// f16 rounding of zero (down) and scale (up), the same f32 operations in the
// same order with no contraction, and codes from floor(x + 0.5) clamped to
// [0, 15]. Finite weights match exactly; a group whose scale is NaN (a NaN
// first element, or all infinite) gets the sign the CPU gets on x86-64.
#include <cstdint>

#include "kernels/cuda/cuda_error.hpp"

namespace specpipe::kernels::cuda {

struct int4_quantize_args {
  const std::uint16_t* w = nullptr;  // bf16 [out][ldw], device
  std::int64_t ldw = 0;              // elements, >= in
  // [out][code_stride] bytes, device. Every byte is written, the padding
  // after a row's (in + 1) / 2 code bytes as zeros, so the destination may
  // be uninitialised. kernels::cpu::int4_code_stride(in) gives the format's
  // stride; any stride that holds the row is accepted.
  std::uint8_t* codes = nullptr;
  std::int64_t code_stride = 0;
  std::uint16_t* scale = nullptr;  // f16 [out][groups], device
  std::uint16_t* zero = nullptr;   // f16 [out][groups], device
  std::int64_t out = 0, in = 0;
  std::int64_t group = 128;  // even, in [2, 1024] (the CPU's limit)
};

// One warp per (row, group): the warp finds the group's min and max, lane 0
// writes scale and zero, and each lane packs whole bytes (two columns), so
// no byte is shared between warps. Launches on `s`, allocates nothing;
// throws std::invalid_argument naming the offending field.
void int4_quantize(const int4_quantize_args& a, stream_t s);

}  // namespace specpipe::kernels::cuda
