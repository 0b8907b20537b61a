// Projections: cuBLAS for prefill-sized m, a GEMV kernel for decode batches.
//
// At decode (m <= 8) the product is bound by reading W once: n*k*2 bytes, e.g.
// 14336 x 4096 bf16 = 117 MB, 28 us at 4.2 TB/s, while its 2*m*n*k flops take
// well under that on the tensor cores. The kernel therefore aims at streaming W
// at full bandwidth: 16-byte loads, several in flight per thread, W read
// exactly once, x (m*k*2 bytes, L1/L2 resident) re-read by each warp.
#include <cuda_bf16.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda {
namespace {

using detail::bf16;

constexpr int gemv_threads = 256;
constexpr int gemv_rows_per_warp = 2;
constexpr int gemv_rows_per_block = (gemv_threads / 32) * gemv_rows_per_warp;

template <int M, bool OutF32>
__global__ void __launch_bounds__(gemv_threads)
    gemv_kernel(const bf16* __restrict__ x, std::int64_t ldx, const bf16* __restrict__ w,
                std::int64_t ldw, void* __restrict__ y, std::int64_t ldy, bool accumulate, int m,
                std::int64_t n, std::int64_t k) {
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const std::int64_t row0 = (std::int64_t(blockIdx.x) * (gemv_threads / 32) + warp) * gemv_rows_per_warp;
  if (row0 >= n) return;
  float acc[gemv_rows_per_warp][M];
#pragma unroll
  for (int r = 0; r < gemv_rows_per_warp; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = 0.f;

  const bf16* wr[gemv_rows_per_warp];
#pragma unroll
  for (int r = 0; r < gemv_rows_per_warp; ++r)
    wr[r] = w + (row0 + r < n ? row0 + r : row0) * ldw;

  // Each step covers 32 lanes x 8 elements; two steps per iteration keep four
  // independent 16-byte W loads in flight per lane.
  constexpr int step = 32 * 8;
  std::int64_t c = std::int64_t(lane) * 8;
  for (; c + step < k; c += 2 * step) {
    uint4 wv[2][gemv_rows_per_warp];
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int r = 0; r < gemv_rows_per_warp; ++r)
        wv[u][r] = __ldcs(reinterpret_cast<const uint4*>(wr[r] + c + u * step));
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      float wf[gemv_rows_per_warp][8];
#pragma unroll
      for (int r = 0; r < gemv_rows_per_warp; ++r) detail::bf16x8_to_f32(wv[u][r], wf[r]);
#pragma unroll
      for (int i = 0; i < M; ++i) {
        if (i >= m) break;
        float xf[8];
        detail::bf16x8_to_f32(__ldg(reinterpret_cast<const uint4*>(x + i * ldx + c + u * step)), xf);
#pragma unroll
        for (int r = 0; r < gemv_rows_per_warp; ++r)
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r][i] = fmaf(wf[r][e], xf[e], acc[r][i]);
      }
    }
  }
  for (; c < k; c += step) {
    float wf[gemv_rows_per_warp][8];
#pragma unroll
    for (int r = 0; r < gemv_rows_per_warp; ++r)
      detail::bf16x8_to_f32(__ldcs(reinterpret_cast<const uint4*>(wr[r] + c)), wf[r]);
#pragma unroll
    for (int i = 0; i < M; ++i) {
      if (i >= m) break;
      float xf[8];
      detail::bf16x8_to_f32(__ldg(reinterpret_cast<const uint4*>(x + i * ldx + c)), xf);
#pragma unroll
      for (int r = 0; r < gemv_rows_per_warp; ++r)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r][i] = fmaf(wf[r][e], xf[e], acc[r][i]);
    }
  }

#pragma unroll
  for (int r = 0; r < gemv_rows_per_warp; ++r) {
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const float v = detail::warp_sum(acc[r][i]);
      const std::int64_t row = row0 + r;
      if (lane == 0 && i < m && row < n) {
        if constexpr (OutF32) {
          float* yp = static_cast<float*>(y) + i * ldy + row;
          *yp = accumulate ? *yp + v : v;
        } else {
          static_cast<bf16*>(y)[i * ldy + row] = __float2bfloat16(v);
        }
      }
    }
  }
}

template <bool OutF32>
void launch_gemv(const gemm_args& a, cudaStream_t s) {
  const unsigned blocks = unsigned((a.n + gemv_rows_per_block - 1) / gemv_rows_per_block);
  const auto* x = reinterpret_cast<const bf16*>(a.x);
  const auto* w = reinterpret_cast<const bf16*>(a.w);
  const int m = int(a.m);
  // M is the register-tile height: 1, 2, 4 or 8 rows of x (m rounded up).
  if (m <= 1)
    gemv_kernel<1, OutF32><<<blocks, gemv_threads, 0, s>>>(x, a.ldx, w, a.ldw, a.y, a.ldy, a.accumulate, m, a.n, a.k);
  else if (m <= 2)
    gemv_kernel<2, OutF32><<<blocks, gemv_threads, 0, s>>>(x, a.ldx, w, a.ldw, a.y, a.ldy, a.accumulate, m, a.n, a.k);
  else if (m <= 4)
    gemv_kernel<4, OutF32><<<blocks, gemv_threads, 0, s>>>(x, a.ldx, w, a.ldw, a.y, a.ldy, a.accumulate, m, a.n, a.k);
  else
    gemv_kernel<8, OutF32><<<blocks, gemv_threads, 0, s>>>(x, a.ldx, w, a.ldw, a.y, a.ldy, a.accumulate, m, a.n, a.k);
  CUDA_CHECK_LAUNCH();
}

void check_args(const gemm_args& a) {
  if (a.m < 0 || a.n <= 0 || a.k <= 0 || a.ldx < a.k || a.ldw < a.k || a.ldy < a.n)
    throw std::invalid_argument("gemm: bad shape m=" + std::to_string(a.m) + " n=" +
                                std::to_string(a.n) + " k=" + std::to_string(a.k) + " ldx=" +
                                std::to_string(a.ldx) + " ldw=" + std::to_string(a.ldw) +
                                " ldy=" + std::to_string(a.ldy));
  if (a.accumulate && a.out != gemm_out::f32)
    throw std::invalid_argument("gemm: accumulate needs an f32 output");
}

}  // namespace

bool gemv_supported(const gemm_args& a) {
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  return a.m >= 1 && a.m <= gemv_max_rows && a.k % 8 == 0 && a.ldx % 8 == 0 && a.ldw % 8 == 0 &&
         aligned(a.x) && aligned(a.w);
}

void gemm_cublas(blas_handle_t h, const gemm_args& a, stream_t s) {
  check_args(a);
  if (a.m == 0) return;
  const cublasHandle_t handle = as_blas(h);
  CUBLAS_CHECK(cublasSetStream(handle, as_stream(s)));
  const float alpha = 1.f, beta = a.accumulate ? 1.f : 0.f;
  // Row-major y[m,n] = x[m,k] W[n,k]^T is column-major y^T[n,m] = W^T... i.e.
  // C(n x m) = op(A = W as k x n col-major)^T * B (x as k x m col-major).
  CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(a.n), int(a.m), int(a.k), &alpha,
                            a.w, CUDA_R_16BF, int(a.ldw), a.x, CUDA_R_16BF, int(a.ldx), &beta, a.y,
                            a.out == gemm_out::f32 ? CUDA_R_32F : CUDA_R_16BF, int(a.ldy),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gemv(const gemm_args& a, stream_t s) {
  check_args(a);
  if (a.m == 0) return;
  if (!gemv_supported(a))
    throw std::invalid_argument("gemv: needs 1 <= m <= 8, k/ldx/ldw multiples of 8 and 16-byte "
                                "aligned x and W; got m=" + std::to_string(a.m) + " k=" +
                                std::to_string(a.k));
  if (a.out == gemm_out::f32) launch_gemv<true>(a, as_stream(s));
  else launch_gemv<false>(a, as_stream(s));
}

void gemm(blas_handle_t h, const gemm_args& a, stream_t s, gemm_impl impl) {
  switch (impl) {
    case gemm_impl::cublas: return gemm_cublas(h, a, s);
    case gemm_impl::gemv: return gemv(a, s);
    case gemm_impl::automatic: break;
  }
  if (gemv_supported(a)) gemv(a, s);
  else gemm_cublas(h, a, s);
}

}  // namespace specpipe::kernels::cuda
