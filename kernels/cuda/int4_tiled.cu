// The tiled repack of 4-bit weights on the GPU (int4_tiled.hpp), the same
// bytes as kernels/cpu/int4_tiled.cpp's tile_int4. Each word of 8 codes is
// 4 bytes of the row layout with its nibbles reordered (even columns first);
// a row's last word is masked when in is not a multiple of 8, as the CPU
// reads no code past in. It runs once per weight matrix, so it is written
// plainly: one 4-byte read per word, one 16-byte store per piece.
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/int4_tiled.hpp"
#include "kernels/int4_tiled.hpp"

namespace specpipe::kernels::cuda {
namespace {

constexpr int tile_threads = 256;
constexpr std::int64_t tile_rows = kernels::cpu::int4_tile_rows;
constexpr std::int64_t tile_cols = kernels::cpu::int4_tile_cols;

// A row-layout word (column e at nibble e) in the tiled order (column e at
// nibble kernels::cpu::int4_tiled_word_nibble(e)).
__device__ __forceinline__ unsigned tiled_nibble_order(unsigned w) {
  unsigned r = 0;
#pragma unroll
  for (int e = 0; e < 8; ++e) r |= ((w >> (4 * e)) & 15u) << (4 * kernels::cpu::int4_tiled_word_nibble(e));
  return r;
}

// Piece p = ((tile * chunks + chunk) * 2 + half) * 32 + lane of the tiled
// codes: row 16 tile + 8 half + lane / 4, words of columns
// 128 chunk + 32 i + 8 (lane % 4).
__global__ void __launch_bounds__(tile_threads)
    int4_tile_codes_kernel(const std::uint8_t* __restrict__ codes, std::int64_t code_stride, std::int64_t out,
                           std::int64_t in, std::int64_t chunks, std::int64_t pieces, uint4* __restrict__ tiled) {
  const std::int64_t p = std::int64_t(blockIdx.x) * tile_threads + threadIdx.x;
  if (p >= pieces) return;
  const int lane = int(p % 32), half = int((p / 32) % 2);
  const std::int64_t block = p / 64, chunk = block % chunks, tile = block / chunks;
  const std::int64_t row = tile * tile_rows + 8 * half + lane / 4;
  unsigned w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::int64_t c0 = chunk * tile_cols + 32 * i + 8 * (lane % 4);
    w[i] = 0;
    if (row < out && c0 < in) {
      w[i] = *reinterpret_cast<const unsigned*>(codes + row * code_stride + c0 / 2);
      if (in - c0 < 8) w[i] &= (1u << (4 * (in - c0))) - 1u;
      w[i] = tiled_nibble_order(w[i]);
    }
  }
  tiled[p] = make_uint4(w[0], w[1], w[2], w[3]);
}

// Entry e = (tile * groups + group) * 8 + g: (scale, zero) of rows
// 16 tile + g and 16 tile + g + 8, +0 for padding rows.
__global__ void __launch_bounds__(tile_threads)
    int4_tile_scales_kernel(const unsigned short* __restrict__ scale, const unsigned short* __restrict__ zero,
                            std::int64_t out, std::int64_t groups, std::int64_t entries, uint2* __restrict__ tiled) {
  const std::int64_t e = std::int64_t(blockIdx.x) * tile_threads + threadIdx.x;
  if (e >= entries) return;
  const std::int64_t tg = e / 8, group = tg % groups, tile = tg / groups;
  const std::int64_t ra = tile * tile_rows + e % 8, rb = ra + 8;
  const auto pair = [&](std::int64_t r) {
    return r < out ? unsigned(scale[r * groups + group]) | unsigned(zero[r * groups + group]) << 16 : 0u;
  };
  tiled[e] = make_uint2(pair(ra), pair(rb));
}

void fail(const std::string& what) { throw std::invalid_argument("int4_tile: " + what); }
bool aligned(const void* p, std::uintptr_t n) { return reinterpret_cast<std::uintptr_t>(p) % n == 0; }

}  // namespace

void int4_tile(const int4_tile_args& a, stream_t s) {
  if (!a.codes) fail("codes is null");
  if (!a.scale) fail("scale is null");
  if (!a.zero) fail("zero is null");
  if (!a.tiled_codes) fail("tiled_codes is null");
  if (!a.tiled_scale_zero) fail("tiled_scale_zero is null");
  if (a.out <= 0) fail("out must be positive, got " + std::to_string(a.out));
  if (a.in <= 0) fail("in must be positive, got " + std::to_string(a.in));
  if (a.group <= 0 || a.group % 2 != 0) fail("group must be even and positive, got " + std::to_string(a.group));
  if (a.code_stride < (a.in + 1) / 2 || a.code_stride % 4 != 0)
    fail("code_stride " + std::to_string(a.code_stride) + " must be a multiple of 4 holding a row of " +
         std::to_string(a.in) + " 4-bit codes");
  if (!aligned(a.codes, 4)) fail("codes is not 4-byte aligned");
  if (!aligned(a.scale, 2) || !aligned(a.zero, 2)) fail("scale or zero is not 2-byte aligned (f16 elements)");
  if (!aligned(a.tiled_codes, 16)) fail("tiled_codes is not 16-byte aligned");
  if (!aligned(a.tiled_scale_zero, 8)) fail("tiled_scale_zero is not 8-byte aligned");
  const std::int64_t chunks = (a.in + tile_cols - 1) / tile_cols, groups = (a.in + a.group - 1) / a.group;
  const std::int64_t pieces = kernels::cpu::int4_tiled_code_bytes(a.out, a.in) / 16;
  const std::int64_t entries = kernels::cpu::int4_tiled_scale_zero_size(a.out, a.in, a.group) / 4;
  for (const std::int64_t count : {pieces, entries})
    if ((count + tile_threads - 1) / tile_threads > INT_MAX)
      fail("out=" + std::to_string(a.out) + " in=" + std::to_string(a.in) + " exceeds one launch's grid");
  const cudaStream_t st = as_stream(s);
  int4_tile_codes_kernel<<<unsigned((pieces + tile_threads - 1) / tile_threads), tile_threads, 0, st>>>(
      a.codes, a.code_stride, a.out, a.in, chunks, pieces, reinterpret_cast<uint4*>(a.tiled_codes));
  CUDA_CHECK_LAUNCH();
  int4_tile_scales_kernel<<<unsigned((entries + tile_threads - 1) / tile_threads), tile_threads, 0, st>>>(
      reinterpret_cast<const unsigned short*>(a.scale), reinterpret_cast<const unsigned short*>(a.zero), a.out,
      groups, entries, reinterpret_cast<uint2*>(a.tiled_scale_zero));
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda
