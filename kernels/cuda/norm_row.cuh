#pragma once
// One row's RMSNorm as both of its users compute it: the RMSNorm kernel
// (norm.cu) and the 4-bit GEMV that normalizes its own input (int4_gemv.cu,
// int4_gemv_args::norm). 256 threads; thread t takes the float4 chunks t,
// t + 256, ... of the row, in that order. Every product and sum is spelled
// out (fmaf, __fmul_rn) so that no contraction choice of the compiler can
// make the two users' bits differ: the draft's tokens must not depend on
// which of them ran. CUDA-only (included from .cu files).
#include <cuda_bf16.h>

#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda::detail {

constexpr int norm_row_threads = 256;

__device__ __forceinline__ float sum_squares4(float ss, const float4& v) {
  return fmaf(v.w, v.w, fmaf(v.z, v.z, fmaf(v.y, v.y, fmaf(v.x, v.x, ss))));
}

// The block's total of v (every thread gets it); `part` is shared memory of
// norm_row_threads / 32 floats. A caller that calls it again must put a
// barrier between (the second call rewrites `part`).
__device__ __forceinline__ float norm_block_sum(float v, float* part) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < norm_row_threads / 32; ++w) total += part[w];
  return total;
}

__device__ __forceinline__ float norm_inverse(float sum_squares, int hidden, float eps) {
  return rsqrtf(sum_squares / float(hidden) + eps);
}

// bf16(x * inv * w) of four elements, packed as two bf16x2 words.
__device__ __forceinline__ uint2 norm_scale4(const float4& x, float inv, const float4& w) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(__fmul_rn(__fmul_rn(x.x, inv), w.x),
                                                  __fmul_rn(__fmul_rn(x.y, inv), w.y));
  const __nv_bfloat162 hi = __floats2bfloat162_rn(__fmul_rn(__fmul_rn(x.z, inv), w.z),
                                                  __fmul_rn(__fmul_rn(x.w, inv), w.w));
  uint2 packed;
  packed.x = *reinterpret_cast<const unsigned*>(&lo);
  packed.y = *reinterpret_cast<const unsigned*>(&hi);
  return packed;
}

}  // namespace specpipe::kernels::cuda::detail
