#pragma once
// The tensor-core products of the 4-bit GEMV (kernels/cuda/int4_gemv.cu),
// which its schedules share: v2-v4 over the row layout, v7 over the tiles.
// A = the codes of 16 weight rows as bf16 128 + q, B = up to 8 rows of x,
// f32 accumulation; the offset and the zero point come off per group:
// sum x (z + s q) = s T + (z - 128 s) sum x. CUDA-only (included from .cu
// files).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda::int4_detail {

using detail::bf16;

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

// Pair p (0..3) of an 8-nibble word as bf16x2 (128 + q_c, 128 + q_{c+4}),
// c = p: nibbles p and p + 4 sit at bits 4p and 4p + 16. The AND and OR are
// one lop3 with the constants in registers: written as C, ptxas emits two
// LOP3s with an immediate each (SASS of v7: 64 LOP3 a chunk for 32 pairs).
__device__ __forceinline__ unsigned offset_pair(unsigned word, int p) {
  unsigned d;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(d) : "r"(word >> (4 * p)), "r"(0x000F000Fu), "r"(0x43004300u));
  return d;  // 0xea: (a & b) | c
}

// One 8-column word of rows g (a) and g + 8 (b) against the same 8 columns
// of x (xw, 8 bf16 in column order): the offset product T into tt and the
// sum of x into sx, on the tensor cores.
__device__ __forceinline__ void word_products(float (&tt)[4], float (&sx)[4], unsigned a, unsigned b,
                                              const uint4& xw) {
  constexpr unsigned ones = 0x3F803F80u;  // bf16x2 (1, 1)
  // Two bf16 per x word, paired (c, c + 4) to match offset_pair: low halves
  // of (x.x, x.z) = columns 0, 4; ...
  const unsigned x0 = __byte_perm(xw.x, xw.z, 0x5410), x1 = __byte_perm(xw.x, xw.z, 0x7632);
  const unsigned x2 = __byte_perm(xw.y, xw.w, 0x5410), x3 = __byte_perm(xw.y, xw.w, 0x7632);
  mma_bf16(tt, offset_pair(a, 0), offset_pair(b, 0), offset_pair(a, 1), offset_pair(b, 1), x0, x1);
  mma_bf16(tt, offset_pair(a, 2), offset_pair(b, 2), offset_pair(a, 3), offset_pair(b, 3), x2, x3);
  mma_bf16(sx, ones, ones, ones, ones, x0, x1);
  mma_bf16(sx, ones, ones, ones, ones, x2, x3);
}

// acc += s T + (z - 128 s) sum x with the f16 scale and zero of row g
// (sa, za) and row g + 8 (sb, zb): C rows g and g + 8, columns 2t and
// 2t + 1 (x rows).
__device__ __forceinline__ void scale_products(float (&acc)[4], const float (&tt)[4], const float (&sx)[4],
                                               unsigned short sa_raw, unsigned short za_raw, unsigned short sb_raw,
                                               unsigned short zb_raw) {
  const float sa = __half2float(__ushort_as_half(sa_raw)), za = __half2float(__ushort_as_half(za_raw));
  const float sb = __half2float(__ushort_as_half(sb_raw)), zb = __half2float(__ushort_as_half(zb_raw));
  acc[0] += sa * tt[0] + (za - 128.f * sa) * sx[0];
  acc[1] += sa * tt[1] + (za - 128.f * sa) * sx[1];
  acc[2] += sb * tt[2] + (zb - 128.f * sb) * sx[2];
  acc[3] += sb * tt[3] + (zb - 128.f * sb) * sx[3];
}

// One 128-column chunk of rows g and g + 8 (codes wa, wb; scale and zero of
// each in s_raw) against the lane's x columns at xc: the offset product T and
// the chunk's sum of x on the tensor cores, then acc += s T + (z - 128 s) sum x.
__device__ __forceinline__ void accumulate_chunk(float (&acc)[4], const uint4& wa, const uint4& wb,
                                          const unsigned short (&s_raw)[4], const bf16* xc, bool has_x) {
  float tt[4] = {0.f, 0.f, 0.f, 0.f}, sx[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // Columns 8i .. 8i + 7 of the lane's 32.
    const uint4 xw = has_x ? __ldg(reinterpret_cast<const uint4*>(xc + 8 * i)) : make_uint4(0, 0, 0, 0);
    word_products(tt, sx, word_of(wa, i), word_of(wb, i), xw);
  }
  scale_products(acc, tt, sx, s_raw[0], s_raw[1], s_raw[2], s_raw[3]);
}

__device__ __forceinline__ unsigned short low_half(unsigned v) { return static_cast<unsigned short>(v & 0xFFFFu); }
__device__ __forceinline__ unsigned short high_half(unsigned v) { return static_cast<unsigned short>(v >> 16); }

}  // namespace specpipe::kernels::cuda::int4_detail
