// RMSNorm with fused residual add. One block per row; the row's sum of squares
// is reduced in f32 (HF computes the variance in f32 as well).
//
// At decode a row is one block on one SM, so the kernel's time is its chain
// of memory round trips, not its bytes (16 KB at hidden 4096). The vector
// kernel issues every load of a thread at once (the weights before waiting
// for the previous kernel, which never writes them), keeps the row in
// registers between the sum and the output, and so pays about one round trip
// to memory where the scalar loop paid one per iteration of each pass.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/norm_row.cuh"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda {
namespace {

using detail::bf16;
constexpr int norm_threads = detail::norm_row_threads;

__device__ __forceinline__ float block_sum(float v) {
  __shared__ float warp_part[norm_threads / 32];
  v = detail::warp_sum(v);
  if ((threadIdx.x & 31) == 0) warp_part[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < norm_threads / 32; ++w) total += warp_part[w];
  return total;
}

// Any hidden size and stride.
__global__ void __launch_bounds__(norm_threads)
    rmsnorm_kernel(float* residual, std::int64_t ld_res, const bf16* delta, std::int64_t ld_delta,
                   const float* weight, bf16* out, std::int64_t ld_out, std::int64_t hidden,
                   float eps) {
  detail::grid_dependency_wait();
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
  const float inv = rsqrtf(block_sum(ss) / float(hidden) + eps);
  bf16* o = out + blockIdx.x * ld_out;
  // Each thread re-reads only the elements it wrote above, so no barrier is
  // needed between the residual update and this pass.
  for (std::int64_t i = threadIdx.x; i < hidden; i += norm_threads)
    o[i] = __float2bfloat16(x[i] * inv * weight[i]);
}

// hidden a multiple of 4 and at most 4 * NV * norm_threads; rows 16-byte
// aligned (f32), delta and out rows 8-byte aligned (bf16). Chunk j of a
// thread is the 4 elements at 4 * (threadIdx.x + j * norm_threads).
template <int NV>
__global__ void __launch_bounds__(norm_threads)
    rmsnorm_vec_kernel(float* residual, std::int64_t ld_res, const bf16* delta, std::int64_t ld_delta,
                       const float* weight, bf16* out, std::int64_t ld_out, int hidden, float eps) {
  const int n4 = hidden / 4;
  float4 wv[NV];
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = threadIdx.x + j * norm_threads;
    wv[j] = c < n4 ? __ldg(reinterpret_cast<const float4*>(weight) + c) : make_float4(0, 0, 0, 0);
  }
  detail::grid_dependency_wait();
  detail::allow_dependent_launch();
  float4* x = reinterpret_cast<float4*>(residual + blockIdx.x * ld_res);
  const uint2* d = delta ? reinterpret_cast<const uint2*>(delta + blockIdx.x * ld_delta) : nullptr;
  float4 xv[NV];
  uint2 dv[NV];
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = threadIdx.x + j * norm_threads;
    xv[j] = c < n4 ? x[c] : make_float4(0, 0, 0, 0);
    dv[j] = d && c < n4 ? d[c] : make_uint2(0, 0);
  }
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = threadIdx.x + j * norm_threads;
    if (d) {
      const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&dv[j].x));
      const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&dv[j].y));
      xv[j].x += lo.x;
      xv[j].y += lo.y;
      xv[j].z += hi.x;
      xv[j].w += hi.y;
      if (c < n4) x[c] = xv[j];
    }
    ss = detail::sum_squares4(ss, xv[j]);  // chunks past the row are zeros: ss unchanged
  }
  __shared__ float part[norm_threads / 32];
  const float inv = detail::norm_inverse(detail::norm_block_sum(ss, part), hidden, eps);
  uint2* o = reinterpret_cast<uint2*>(out + blockIdx.x * ld_out);
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = threadIdx.x + j * norm_threads;
    if (c >= n4) break;
    o[c] = detail::norm_scale4(xv[j], inv, wv[j]);
  }
}

bool aligned(const void* p, std::uintptr_t n) { return reinterpret_cast<std::uintptr_t>(p) % n == 0; }

}  // namespace

void rmsnorm(float* residual, std::int64_t ld_res, const std::uint16_t* delta, std::int64_t ld_delta,
             const float* weight, std::uint16_t* out, std::int64_t ld_out, std::int64_t rows,
             std::int64_t hidden, float eps, stream_t s, bool dependent) {
  if (rows <= 0) return;
  const auto st = as_stream(s);
  const auto* dl = reinterpret_cast<const bf16*>(delta);
  auto* o = reinterpret_cast<bf16*>(out);
  const bool vec = hidden % 4 == 0 && hidden <= 8 * 4 * norm_threads && ld_res % 4 == 0 && ld_out % 4 == 0 &&
                   aligned(residual, 16) && aligned(weight, 16) && aligned(out, 8) &&
                   (!delta || (ld_delta % 4 == 0 && aligned(delta, 8)));
  const dim3 grid{unsigned(rows)}, block{unsigned(norm_threads)};
  const int h = int(hidden);
  if (!vec)
    detail::launch_kernel(rmsnorm_kernel, grid, block, 0, st, dependent, residual, ld_res, dl, ld_delta, weight, o,
                          ld_out, hidden, eps);
  else if (hidden <= 4 * norm_threads)
    detail::launch_kernel(rmsnorm_vec_kernel<1>, grid, block, 0, st, dependent, residual, ld_res, dl, ld_delta,
                          weight, o, ld_out, h, eps);
  else if (hidden <= 2 * 4 * norm_threads)
    detail::launch_kernel(rmsnorm_vec_kernel<2>, grid, block, 0, st, dependent, residual, ld_res, dl, ld_delta,
                          weight, o, ld_out, h, eps);
  else if (hidden <= 4 * 4 * norm_threads)
    detail::launch_kernel(rmsnorm_vec_kernel<4>, grid, block, 0, st, dependent, residual, ld_res, dl, ld_delta,
                          weight, o, ld_out, h, eps);
  else
    detail::launch_kernel(rmsnorm_vec_kernel<8>, grid, block, 0, st, dependent, residual, ld_res, dl, ld_delta,
                          weight, o, ld_out, h, eps);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda
