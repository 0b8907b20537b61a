#pragma once
// One rotated pair of RoPE (HF's rotate_half: dims d and d + head_dim / 2),
// shared by the RoPE-and-append kernel (rope_append.cu) and the draft's qkv
// GEMV, which does the same as its epilogue (int4_gemv.cu): every product and
// sum is spelled out (__fmul_rn, __fsub_rn) so that compiler contraction
// cannot make the two give different bits.
#include <cuda_bf16.h>

#include <cstdint>

namespace specpipe::kernels::cuda::detail {

// x0, x1: the pair as bf16 values in f32; freq: inv_freq[d].
__device__ __forceinline__ void rope_rotate(float x0, float x1, std::int32_t pos, float freq, __nv_bfloat16& r0,
                                            __nv_bfloat16& r1) {
  // HF: freqs = inv_freq * position in f32, then cos/sin (precise versions:
  // the argument reaches 1e5 radians at long contexts).
  float sn, cs;
  sincosf(__fmul_rn(float(pos), freq), &sn, &cs);
  r0 = __float2bfloat16(__fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn)));
  r1 = __float2bfloat16(__fadd_rn(__fmul_rn(x1, cs), __fmul_rn(x0, sn)));
}

}  // namespace specpipe::kernels::cuda::detail
