#pragma once
// The tiled repack of the draft's 4-bit weights on the GPU: the CUDA twin of
// kernels::cpu::tile_int4 (kernels/int4_tiled.hpp has the layout and why),
// byte for byte. It runs once per projection when the draft is made
// (cuda_model::make_draft) or before a bench times int4 GEMV version 7, so
// the row-layout copy never has to visit host memory.
#include <cstdint>

#include "kernels/cuda/cuda_error.hpp"

namespace specpipe::kernels::cuda {

struct int4_tile_args {
  // The row layout (kernels/int4_linear.hpp), device: codes [out][code_stride]
  // (4-byte aligned, code_stride a multiple of 4 holding (in + 1) / 2 bytes:
  // the format's stride is), f16 scale and zero [out][groups].
  const std::uint8_t* codes = nullptr;
  std::int64_t code_stride = 0;
  const std::uint16_t* scale = nullptr;
  const std::uint16_t* zero = nullptr;
  std::int64_t out = 0, in = 0;
  std::int64_t group = 128;  // even, positive
  // The tiled copy, device, every byte written (padding included), so it may
  // be uninitialised: kernels::cpu::int4_tiled_code_bytes(out, in) bytes
  // (16-byte aligned) and kernels::cpu::int4_tiled_scale_zero_size(out, in,
  // group) f16 (8-byte aligned). Must not overlap the source.
  std::uint8_t* tiled_codes = nullptr;
  std::uint16_t* tiled_scale_zero = nullptr;
};

// One thread per 16-byte piece of the tiled codes (four words gathered from
// one row), one per (tile, group, g) entry of the scales. Launches on `s`,
// allocates nothing; throws std::invalid_argument naming the offending field.
void int4_tile(const int4_tile_args& a, stream_t s);

}  // namespace specpipe::kernels::cuda
