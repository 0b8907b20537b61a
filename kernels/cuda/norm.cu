// RMSNorm with fused residual add. One block per row; the row's sum of squares
// is reduced in f32 (HF computes the variance in f32 as well).
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda {
namespace {

using detail::bf16;
constexpr int norm_threads = 256;

__global__ void __launch_bounds__(norm_threads)
    rmsnorm_kernel(float* residual, std::int64_t ld_res, const bf16* delta, std::int64_t ld_delta,
                   const float* weight, bf16* out, std::int64_t ld_out, std::int64_t hidden,
                   float eps) {
  // The GEMV that follows (launched with overlap_launch) may start streaming
  // its weights now; it waits for this kernel before reading `out`.
  detail::allow_dependent_launch();
  float* x = residual + blockIdx.x * ld_res;
  const bf16* d = delta ? delta + blockIdx.x * ld_delta : nullptr;
  float ss = 0.f;
  for (std::int64_t i = threadIdx.x; i < hidden; i += norm_threads) {
    float v = x[i];
    if (d) {
      v += __bfloat162float(d[i]);
      x[i] = v;
    }
    ss += v * v;
  }
  __shared__ float warp_part[norm_threads / 32];
  ss = detail::warp_sum(ss);
  if ((threadIdx.x & 31) == 0) warp_part[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < norm_threads / 32; ++w) total += warp_part[w];
  const float inv = rsqrtf(total / float(hidden) + eps);
  bf16* o = out + blockIdx.x * ld_out;
  // Each thread re-reads only the elements it wrote above, so no barrier is
  // needed between the residual update and this pass.
  for (std::int64_t i = threadIdx.x; i < hidden; i += norm_threads)
    o[i] = __float2bfloat16(x[i] * inv * weight[i]);
}

}  // namespace

void rmsnorm(float* residual, std::int64_t ld_res, const std::uint16_t* delta, std::int64_t ld_delta,
             const float* weight, std::uint16_t* out, std::int64_t ld_out, std::int64_t rows,
             std::int64_t hidden, float eps, stream_t s) {
  if (rows <= 0) return;
  rmsnorm_kernel<<<unsigned(rows), norm_threads, 0, as_stream(s)>>>(
      residual, ld_res, reinterpret_cast<const bf16*>(delta), ld_delta, weight,
      reinterpret_cast<bf16*>(out), ld_out, hidden, eps);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda
