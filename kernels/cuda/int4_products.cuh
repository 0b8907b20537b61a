#pragma once
// The 4-bit GEMV's products on the tensor cores, shared by its schedules
// (int4_gemv.cu: v2-v4 over the row layout and v7 over the tiles;
// int4_gemv_bulk.cu: v9 over the tiles). A = 16 weight rows as bf16 128 + q
// (one lop3 per code pair), B = up to 8 rows of x as stored, f32
// accumulation; a second MMA with A = ones gives the sum of x that the
// offset and the zero point need: sum x (z + s q) = s T + (z - 128 s) sum x.
// CUDA-only (included from .cu files).
#include <cuda_fp16.h>

#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda::detail {

constexpr int int4_chunk = 128;  // columns per MMA chunk: 4 lanes x 32, 1 KB of codes for 16 rows

__device__ __forceinline__ unsigned word_of(const uint4& v, int w) {
  return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Pair p (0..3) of an 8-nibble word as bf16x2 (128 + q, 128 + q'): nibbles
// p and p + 4, at bits 4p and 4p + 16.
__device__ __forceinline__ unsigned offset_pair(unsigned word, int p) {
  return and_or(word >> (4 * p), 0x000F000Fu, 0x43004300u);
}

// One 8-column word of the tiles (kernels/int4_tiled.hpp) of rows g (a) and
// g + 8 (b) against x's 8 columns xw: pair p is columns 2p, 2p + 1, x's
// register p as loaded. The offset product T into tt, the sum of x into sx.
__device__ __forceinline__ void tiled_word_products(float (&tt)[4], float (&sx)[4], unsigned a, unsigned b,
                                                    const uint4& xw) {
  constexpr unsigned ones = 0x3F803F80u;  // bf16x2 (1, 1)
  mma_bf16(tt, offset_pair(a, 0), offset_pair(b, 0), offset_pair(a, 1), offset_pair(b, 1), xw.x, xw.y);
  mma_bf16(tt, offset_pair(a, 2), offset_pair(b, 2), offset_pair(a, 3), offset_pair(b, 3), xw.z, xw.w);
  mma_bf16(sx, ones, ones, ones, ones, xw.x, xw.y);
  mma_bf16(sx, ones, ones, ones, ones, xw.z, xw.w);
}

// acc += s T + (z - 128 s) sum x from the tiled (sa, za, sb, zb) entry of
// rows g and g + 8: D rows g, g + 8, columns 2t, 2t + 1 (rows of x).
__device__ __forceinline__ void tiled_scale_products(float (&acc)[4], const float (&tt)[4], const float (&sx)[4],
                                                     uint2 sz) {
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&sz.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&sz.y));
  const float za = fmaf(-128.f, a.x, a.y), zb = fmaf(-128.f, b.x, b.y);
  acc[0] = fmaf(a.x, tt[0], fmaf(za, sx[0], acc[0]));
  acc[1] = fmaf(a.x, tt[1], fmaf(za, sx[1], acc[1]));
  acc[2] = fmaf(b.x, tt[2], fmaf(zb, sx[2], acc[2]));
  acc[3] = fmaf(b.x, tt[3], fmaf(zb, sx[3], acc[3]));
}

}  // namespace specpipe::kernels::cuda::detail
