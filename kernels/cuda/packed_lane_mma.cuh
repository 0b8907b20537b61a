#pragma once
// The packed attention v4's register-level building blocks
// (packed_attention_v4.cu): lane-order code pairs (packed_lane_order.hpp)
// to exact f16x2 operands, f16x2 arithmetic on raw registers with constants
// ptxas folds into immediates, and the shared-memory word loads. CUDA-only.
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/packed_lane_order.hpp"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda::lane_mma {

__device__ __forceinline__ unsigned as_u32(__half2 h) { return *reinterpret_cast<unsigned*>(&h); }
__device__ __forceinline__ unsigned pack_f16(float lo, float hi) { return as_u32(__floats2half2_rn(lo, hi)); }
// bf16x2 -> f16x2 (window rows).
__device__ __forceinline__ unsigned bf2_to_h2(unsigned w) {
  const float lo = __uint_as_float(w << 16), hi = __uint_as_float(w & 0xffff0000u);
  return pack_f16(lo, hi);
}
__device__ __forceinline__ float bf16_bits_to_f32(std::uint16_t b) { return __uint_as_float(unsigned(b) << 16); }

// f16x2 bit patterns of the exact constants below (integer arithmetic, so
// they fold once the unrolled loops fix p), and f16x2 FMA/MUL on raw
// registers: ptxas folds constant operands into the instruction's
// immediates (the cvt inside __float2half2_rn is inline asm it keeps).
__host__ __device__ constexpr unsigned h2(unsigned bits) { return bits * 0x10001u; }
__host__ __device__ constexpr unsigned f16_pow2(int e) { return unsigned(e + 15) << 10; }  // 2^e
constexpr unsigned f16_sign = 0x8000u;
__device__ __forceinline__ unsigned hfma2_raw(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ unsigned hmul2_raw(unsigned a, unsigned b) {
  unsigned d;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// The 8x8 f16 tile whose row g, columns 2t and 2t + 1 lane (g, t) holds (an
// MMA accumulator's layout once packed), transposed: afterwards the lane
// holds row g of the transpose. One instruction (sm_75+).
__device__ __forceinline__ unsigned transpose8x8(unsigned x) {
  unsigned y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// 2^x by MUFU.EX2 alone, results below 2^-126 flushed to zero, 2^-inf = 0.
// exp2f adds a range fix-up for those results (a compare and two predicated
// multiplies around each MUFU); a softmax weight that small rounds to zero
// in the f16 P' anyway and is nothing beside the maximum's 1 in the f32 sum.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Constant powers of two for hmul2_raw (exact scaling but for subnormals).
constexpr unsigned h2_sixteenth = h2(f16_pow2(-4));            // (1/16, 1/16)
constexpr unsigned h2_minus_half = h2(f16_sign | f16_pow2(-1));  // (-0.5, -0.5)

// Pair i of a lane's words as f16x2 subnormals c 2^(p - 24), p =
// lane_order::pair_shift(i, B): one AND (and a shift per word for bytes 1 and 3). The
// code lies in the mantissa under a zero exponent (p + B <= 8 < 10), so each
// half is exactly c 2^p times f16's smallest subnormal 2^-24. The MMAs take
// subnormal f16 operands exactly (products and the f32 sum are far above
// f32's subnormals), so the 2^(p - 24) factors are folded into the other
// operand (2^-p) and the f32 result (2^24), with no bias to take off: the
// 1024 + c bias that the earlier HFMA2 removed could not be folded that way
// (its f32 sum cancels; NOTES.md, Stop 21 and Stop 31).
template <int B>
__device__ __forceinline__ unsigned sub_pair(const unsigned* w, int i) {
  constexpr int PW = lane_order::pairs_per_word(B), PH = lane_order::pairs_per_half(B);
  const int s = i % PW, p = lane_order::pair_shift(i, B);
  const unsigned x = s >= PH ? (w[i / PW] >> 8) : w[i / PW];
  constexpr unsigned m = (1u << B) - 1u;
  return x & ((m << p) | (m << (p + 16)));
}
// The INT8 read of hier (both planes 4-bit in the same order) as (16 u + l)
// 2^(p - 24): u's subnormal times 16 plus l's, exact (at most 8 significant
// bits; fma.rn.f16x2 without .ftz keeps subnormals).
__device__ __forceinline__ unsigned sub_pair8(const unsigned* u, const unsigned* l, int i) {
  return hfma2_raw(sub_pair<4>(u, i), h2(f16_pow2(4)), sub_pair<4>(l, i));
}

// f32 2^e for normal results (an immediate once an unrolled loop fixes e).
__device__ __forceinline__ float f32_pow2(int e) { return __int_as_float((127 + e) << 23); }

template <int NG>
__device__ __forceinline__ void token_pairs(const std::uint16_t* at_t0, unsigned (&out)[NG]) {
  if constexpr (NG == 1) {
    out[0] = *reinterpret_cast<const unsigned*>(at_t0);
  } else if constexpr (NG == 2) {
    const uint2 v = *reinterpret_cast<const uint2*>(at_t0);
    out[0] = __byte_perm(v.x, v.y, 0x5410);
    out[1] = __byte_perm(v.x, v.y, 0x7632);
  } else {
    const uint4 v = *reinterpret_cast<const uint4*>(at_t0);
    out[0] = __byte_perm(v.x, v.z, 0x5410);
    out[1] = __byte_perm(v.x, v.z, 0x7632);
    out[2] = __byte_perm(v.y, v.w, 0x5410);
    out[3] = __byte_perm(v.y, v.w, 0x7632);
  }
}

template <int N>
__device__ __forceinline__ void lds_words(const unsigned char* p, unsigned (&w)[N]) {
  if constexpr (N == 1) {
    w[0] = *reinterpret_cast<const unsigned*>(p);
  } else if constexpr (N == 2) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x;
    w[1] = v.y;
  } else {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      const uint4 v = *reinterpret_cast<const uint4*>(p + 4 * i);
      w[i] = v.x;
      w[i + 1] = v.y;
      w[i + 2] = v.z;
      w[i + 3] = v.w;
    }
  }
}

}  // namespace specpipe::kernels::cuda::lane_mma
