#pragma once
// The packed attention's register-level building blocks (packed_attention.cu):
// code words to f16 A fragments (packed_fragments.hpp has the layouts), the
// m16n8k16 f16 MMA, f16x2 arithmetic on raw registers, and warp sums of
// several values at once. CUDA-only (included from .cu files).
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/packed_fragments.hpp"

namespace specpipe::kernels::cuda::packed_mma {

__device__ __forceinline__ unsigned lds32(const unsigned char* p) { return *reinterpret_cast<const unsigned*>(p); }

// f16x2 arithmetic on raw registers.
__device__ __forceinline__ unsigned hfma2_bits(unsigned x, float mul, float add) {
  __half2 h = *reinterpret_cast<const __half2*>(&x);
  h = __hfma2(h, __float2half2_rn(mul), __float2half2_rn(add));
  return *reinterpret_cast<const unsigned*>(&h);
}
__device__ __forceinline__ unsigned r0_code(unsigned raw) { return hfma2_bits(raw, 1.f, -1024.f); }
template <int B>
__device__ __forceinline__ unsigned r1_code(unsigned raw) {
  return hfma2_bits(raw, frag::r1_mul(B), frag::r1_add(B));
}
__device__ __forceinline__ std::uint16_t f16_bits(float x) { return __half_as_ushort(__float2half_rn(x)); }

// Warp sums of N values at once (N a power of two <= 32): each butterfly
// round with offset 16, 8, ... halves the values a lane keeps (the lane with
// that offset bit set keeps the upper half) and sends the others, then the
// last value is summed over the remaining offsets: 2 log2(N) - 1 + 5 -
// log2(N) shuffles instead of 5 N. Lane L ends with the sum of value
// L >> (5 - log2 N); every addition pairs the same operands as detail::
// warp_sum's butterfly (offsets 16 down to 1), so the sums are identical.
template <int N>
__device__ __forceinline__ float warp_sum_many(float (&v)[N], int lane) {
  int off = 16;
#pragma unroll
  for (int n = N; n > 1; n >>= 1) {
    const bool up = (lane & off) != 0;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float keep = up ? v[i + n / 2] : v[i];
      const float send = up ? v[i] : v[i + n / 2];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, off);
    }
    off >>= 1;
  }
  float x = v[0];
#pragma unroll
  for (int o = 16 / N; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// D += A B, m16n8k16, f16 inputs, f32 accumulate (fragments: packed_fragments.hpp).
__device__ __forceinline__ void mma16816(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The four A registers of one lane from its two code words (and, INT8, the
// lower-plane words at the same offsets): rows g and g+8 of each word.
template <int B, bool LOWER>
__device__ __forceinline__ void a_regs(unsigned w1, unsigned w2, unsigned l1, unsigned l2, int g, unsigned& a0,
                                       unsigned& a1, unsigned& a2, unsigned& a3) {
  if constexpr (LOWER) {
    const frag::raw_pair x = frag::extract_int8(w1, l1, g), y = frag::extract_int8(w2, l2, g);
    a0 = r0_code(x.r0);
    a1 = r0_code(x.r1);
    a2 = r0_code(y.r0);
    a3 = r0_code(y.r1);
  } else {
    const frag::raw_pair x = frag::extract(w1, B, g), y = frag::extract(w2, B, g);
    a0 = r0_code(x.r0);
    a1 = r1_code<B>(x.r1);
    a2 = r0_code(y.r0);
    a3 = r1_code<B>(y.r1);
  }
}

// A lane's code word of each of the CB channel blocks of one token row (at
// cb * 4 * B bytes from `p`): one vector load when the words are adjacent
// (1 bit: a whole 16- or 8-byte row), else one load per block.
template <int B, int CB>
__device__ __forceinline__ void load_words(const unsigned char* p, unsigned (&w)[CB]) {
  if constexpr (B == 1 && CB == 4) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
  } else if constexpr (B == 1 && CB == 2) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x;
    w[1] = v.y;
  } else {
#pragma unroll
    for (int cb = 0; cb < CB; ++cb) w[cb] = lds32(p + cb * 4 * B);
  }
}

}  // namespace specpipe::kernels::cuda::packed_mma
