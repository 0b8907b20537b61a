// Projections: cuBLAS for prefill-sized m, a GEMV kernel for decode batches
// (the rule is gemv_preferred in gemm.hpp).
//
// At decode the product is bound by reading W once: n*k*2 bytes, e.g.
// 14336 x 4096 bf16 = 117 MB, 28 us at 4.2 TB/s, while its 2*m*n*k flops take
// well under that. The kernel therefore aims at streaming W at full
// bandwidth: 16-byte loads, four per row in flight per lane, W read exactly once, x (m*k*2 bytes, L1/L2 resident)
// re-read by each warp.
//
// v1 gave each warp two whole rows: at n = 4096..6144 that is 2048..3072
// warps, 16..23 per SM, too few loads in flight (61% and 80% of the copy
// bandwidth measured). v2 lets up to 8 warps of a block share a row pair,
// each over its own slice of k, summed through shared memory, with the split
// chosen from the occupancy so that the grid is about one full wave.
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
constexpr int gemv_warps = gemv_threads / 32;
constexpr int gemv_rows_per_warp = 2;
constexpr int gemv_step = 32 * 8;  // elements of k one warp covers per 16-byte load

using detail::allow_dependent_launch;
using detail::grid_dependency_wait;

// Eight consecutive inputs of row i at column c, as f32.
__device__ __forceinline__ void load_x8(const bf16* __restrict__ x, std::int64_t ldx, int i, std::int64_t c,
                                        float (&xf)[8]) {
  detail::bf16x8_to_f32(__ldg(reinterpret_cast<const uint4*>(x + i * ldx + c)), xf);
}

// The output kinds as a template parameter.
enum : int { out_bf16 = 0, out_f32 = 1, out_swiglu = 2 };

// Block: gemv_warps / ks row pairs; warp w serves pair w / ks over slice
// w % ks of k (slices of kslice elements, a multiple of gemv_step). U: loads
// per row in flight per lane. Pair p is rows 2p and 2p + 1, or for the
// SwiGLU output gate row p and up row p + n / 2.
// ptxas (sm_90, CUDA 13), registers at M = 1 / 2 and the blocks per SM they
// allow: U = 4: 60 / 76 (4 / 3); U = 2: 40 / 48 (6 / 5) (NOTES.md, GEMV v2
// and version 3). The minimum blocks per SM below are what each
// instantiation reached unconstrained, except M = 2, U = 2 (SpeCache's two
// rows), which its own loop order brings from 60 registers (4 blocks) to 48
// (5 blocks) without spills: stop 19 in NOTES.md.
constexpr int gemv_min_blocks(int m, int u) {
  return m == 1 ? (u == 2 ? 6 : 4) : m == 2 ? (u == 2 ? 5 : 3) : m == 4 ? 3 : (u == 2 ? 3 : 2);
}

template <int M, int Out, int U>
__global__ void __launch_bounds__(gemv_threads, gemv_min_blocks(M, U))
    gemv_kernel(const bf16* __restrict__ x, std::int64_t ldx, const bf16* __restrict__ w,
                std::int64_t ldw, void* __restrict__ y, std::int64_t ldy, bool accumulate, int m,
                std::int64_t n, std::int64_t k, int ks, std::int64_t kslice) {
  constexpr int R = gemv_rows_per_warp;
  __shared__ float red[gemv_warps][R][M];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int pairs = gemv_warps / ks;
  const int pair = warp / ks, slice = warp - pair * ks;
  const std::int64_t p = std::int64_t(blockIdx.x) * pairs + pair;
  const std::int64_t s_begin = std::int64_t(slice) * kslice;
  const std::int64_t s_end = s_begin + kslice < k ? s_begin + kslice : k;

  const bf16* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::int64_t row = Out == out_swiglu ? p + r * (n / 2) : p * R + r;
    const bool valid = Out == out_swiglu ? p < n / 2 : row < n;
    wr[r] = w + (valid ? row : n - 1) * ldw;  // in bounds; unused rows masked
  }

  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = 0.f;

  auto load_w = [&](std::int64_t c, uint4 (&v)[U][R]) {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r)
        v[u][r] = c + u * gemv_step < s_end ? __ldcs(reinterpret_cast<const uint4*>(wr[r] + c + u * gemv_step))
                                            : make_uint4(0, 0, 0, 0);
  };

  // U x R independent 16-byte loads per lane are in flight per chunk; the
  // occupancy (about 64 registers, 4 blocks of 8 warps per SM) keeps ~32 warps
  // x 8 loads x 512 B = 128 KB in flight per SM, enough for its share of the
  // bandwidth at a ~1-2 us loaded latency.
  std::int64_t c = s_begin + std::int64_t(lane) * 8;
  uint4 wv[U][R];
  load_w(c, wv);
  // Only weights were read so far: with overlap_launch this block may have
  // started before the kernel that writes x (and reads or writes y) finished.
  grid_dependency_wait();
  allow_dependent_launch();
  while (c < s_end) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::int64_t cu = c + u * gemv_step;
      if (cu >= s_end) break;
      if constexpr (M == 2) {
        // Per weight row, both x rows: x's 16-byte pieces stay packed until
        // used (converted once per weight row, 8 more instructions), so only
        // one row's weights are live in f32. Each accumulator sums the same
        // products in the same order as the loop below.
        uint4 xr[M];
#pragma unroll
        for (int i = 0; i < M; ++i)
          xr[i] = i < m ? __ldg(reinterpret_cast<const uint4*>(x + i * ldx + cu)) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float wf[8];
          detail::bf16x8_to_f32(wv[u][r], wf);
#pragma unroll
          for (int i = 0; i < M; ++i) {
            float xf[8];
            detail::bf16x8_to_f32(xr[i], xf);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[r][i] = fmaf(wf[e], xf[e], acc[r][i]);
          }
        }
      } else {
        float wf[R][8];
#pragma unroll
        for (int r = 0; r < R; ++r) detail::bf16x8_to_f32(wv[u][r], wf[r]);
#pragma unroll
        for (int i = 0; i < M; ++i) {
          if (i >= m) break;
          float xf[8];
          load_x8(x, ldx, i, cu, xf);
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[r][i] = fmaf(wf[r][e], xf[e], acc[r][i]);
        }
      }
    }
    c += U * gemv_step;
    if (c < s_end) load_w(c, wv);
  }

#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const float v = detail::warp_sum(acc[r][i]);
      if (lane == 0) red[warp][r][i] = v;
    }
  __syncthreads();
  // Slices summed in a fixed order: the result does not depend on timing.
  const int t = threadIdx.x;
  if constexpr (Out == out_swiglu) {
    if (t < pairs * M) {
      const int bp = t / M, i = t % M;
      const std::int64_t row = std::int64_t(blockIdx.x) * pairs + bp;
      if (i < m && row < n / 2) {
        float g = 0.f, u = 0.f;
        for (int s = 0; s < ks; ++s) {
          g += red[bp * ks + s][0][i];
          u += red[bp * ks + s][1][i];
        }
        // As the bf16 projection and kernels/cuda/activation.cu's SwiGLU.
        g = __bfloat162float(__float2bfloat16(g));
        u = __bfloat162float(__float2bfloat16(u));
        static_cast<bf16*>(y)[i * ldy + row] = __float2bfloat16(g / (1.f + __expf(-g)) * u);
      }
    }
  } else if (t < pairs * R * M) {
    const int bp = t / (R * M), r = (t / M) % R, i = t % M;
    const std::int64_t row = (std::int64_t(blockIdx.x) * pairs + bp) * R + r;
    if (i < m && row < n) {
      float v = 0.f;
      for (int s = 0; s < ks; ++s) v += red[bp * ks + s][r][i];
      if constexpr (Out == out_f32) {
        float* yp = static_cast<float*>(y) + i * ldy + row;
        *yp = accumulate ? *yp + v : v;
      } else {
        static_cast<bf16*>(y)[i * ldy + row] = __float2bfloat16(v);
      }
    }
  }
}

template <int M, int Out, int U>
int resident_blocks() {
  // Per instantiation and process: the device does not change under a
  // running forward pass, and this keeps the occupancy query out of the
  // per-step path (and out of graph capture after the first eager step).
  static const int blocks = [] {
    int dev = 0, sms = 0, per_sm = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_kernel<M, Out, U>, gemv_threads,
                                                             0));
    return sms * (per_sm > 0 ? per_sm : 1);
  }();
  return blocks;
}

template <int M, int Out, int U>
int k_split_of(const gemm_args& a) {
  return a.k_split ? gemv_k_split(a.n, a.k, resident_blocks<M, Out, U>()) : 1;
}

template <int M, int Out, int U>
void launch_gemv_t(const gemm_args& a, cudaStream_t s) {
  const int ks = k_split_of<M, Out, U>(a);
  const std::int64_t rows_per_block = std::int64_t(gemv_warps / ks) * gemv_rows_per_warp;
  const std::int64_t kslice = ((a.k + ks - 1) / ks + gemv_step - 1) / gemv_step * gemv_step;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned((a.n + rows_per_block - 1) / rows_per_block));
  cfg.blockDim = dim3(gemv_threads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = a.overlap_launch ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, gemv_kernel<M, Out, U>, reinterpret_cast<const bf16*>(a.x), a.ldx,
                                reinterpret_cast<const bf16*>(a.w), a.ldw, a.y, a.ldy, a.accumulate, int(a.m), a.n,
                                a.k, ks, kslice));
  CUDA_CHECK_LAUNCH();
}

// What one instantiation of the kernel is asked to do: launch it, or report
// its k-split or occupancy (so the benchmark prints what really ran).
enum class gemv_op : std::uint8_t { launch, k_split, resident };

template <int M, int Out, int U>
int gemv_do_t(gemv_op op, const gemm_args& a, cudaStream_t s) {
  switch (op) {
    case gemv_op::launch: launch_gemv_t<M, Out, U>(a, s); return 0;
    case gemv_op::k_split: return k_split_of<M, Out, U>(a);
    case gemv_op::resident: return resident_blocks<M, Out, U>();
  }
  return 0;
}

template <int Out, int U>
int gemv_do_m(gemv_op op, const gemm_args& a, cudaStream_t s) {
  // M is the register-tile height: 1, 2, 4 or 8 rows of x (m rounded up).
  if (a.m <= 1) return gemv_do_t<1, Out, U>(op, a, s);
  if (a.m <= 2) return gemv_do_t<2, Out, U>(op, a, s);
  if (a.m <= 4) return gemv_do_t<4, Out, U>(op, a, s);
  return gemv_do_t<8, Out, U>(op, a, s);
}

template <int Out>
int gemv_do_u(gemv_op op, const gemm_args& a, cudaStream_t s) {
  return a.unroll == 2 ? gemv_do_m<Out, 2>(op, a, s) : gemv_do_m<Out, 4>(op, a, s);
}

void check_args(const gemm_args& a) {
  const bool glu = a.out == gemm_out::swiglu;
  const std::int64_t ycols = glu ? a.n / 2 : a.n;
  if (a.m < 0 || a.n <= 0 || a.k <= 0 || a.ldx < a.k || a.ldw < a.k || a.ldy < ycols)
    throw std::invalid_argument("gemm: bad shape m=" + std::to_string(a.m) + " n=" + std::to_string(a.n) +
                                " k=" + std::to_string(a.k) + " ldx=" + std::to_string(a.ldx) +
                                " ldw=" + std::to_string(a.ldw) + " ldy=" + std::to_string(a.ldy) + " (y has " +
                                std::to_string(ycols) + " columns)");
  if (glu && a.n % 2 != 0)
    throw std::invalid_argument("gemm: the SwiGLU output needs [gate; up] rows (n even), got n=" +
                                std::to_string(a.n));
  if (a.accumulate && a.out != gemm_out::f32)
    throw std::invalid_argument("gemm: accumulate needs an f32 output");
}

}  // namespace

int gemv_k_split(std::int64_t n, std::int64_t k, int resident) {
  // The largest split whose grid still fits in one wave, as long as every
  // slice keeps at least two loads per lane (2 * gemv_step elements): more
  // warps in flight per SM without a second, partly empty wave.
  int best = 1;
  for (int ks = 2; ks <= gemv_warps; ks *= 2) {
    const std::int64_t rows_per_block = std::int64_t(gemv_warps / ks) * gemv_rows_per_warp;
    const std::int64_t blocks = (n + rows_per_block - 1) / rows_per_block;
    if (blocks > resident || k < std::int64_t(ks) * 2 * gemv_step) break;
    best = ks;
  }
  return best;
}

bool gemv_supported(const gemm_args& a) {
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  return a.m >= 1 && a.m <= gemv_max_rows && a.k % 8 == 0 && a.ldx % 8 == 0 && a.ldw % 8 == 0 &&
         aligned(a.x) && aligned(a.w);
}

gemm_impl gemm_resolve(const gemm_args& a, gemm_impl impl) {
  if (impl != gemm_impl::automatic) return impl;
  if (a.out == gemm_out::swiglu) return gemm_impl::gemv;  // only the GEMV writes the SwiGLU
  return gemv_preferred(a.m) && gemv_supported(a) ? gemm_impl::gemv : gemm_impl::cublas;
}

void gemm_cublas(blas_handle_t h, const gemm_args& a, stream_t s) {
  check_args(a);
  if (a.out == gemm_out::swiglu)
    throw std::invalid_argument("gemm_cublas: the SwiGLU output is fused into the GEMV only; run swiglu after");
  if (a.m == 0) return;
  const cublasHandle_t handle = as_blas(h);
  CUBLAS_CHECK(cublasSetStream(handle, as_stream(s)));
  const float alpha = 1.f, beta = a.accumulate ? 1.f : 0.f;
  // Row-major y[m,n] = x[m,k] W[n,k]^T is column-major y^T[n,m] = W^T... i.e.
  // C(n x m) = op(A = W as k x n col-major)^T * B (x as k x m col-major).
  // bf16 operands, f32 accumulation (CUBLAS_COMPUTE_32F: tensor cores on
  // sm_80+, neither the pedantic nor a tf32 path).
  CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(a.n), int(a.m), int(a.k), &alpha,
                            a.w, CUDA_R_16BF, int(a.ldw), a.x, CUDA_R_16BF, int(a.ldx), &beta, a.y,
                            a.out == gemm_out::f32 ? CUDA_R_32F : CUDA_R_16BF, int(a.ldy),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

namespace {
int gemv_dispatch(gemv_op op, const gemm_args& a, cudaStream_t s) {
  check_args(a);
  if (!gemv_supported(a))
    throw std::invalid_argument("gemv: needs 1 <= m <= 8, k/ldx/ldw multiples of 8 and 16-byte "
                                "aligned x and W; got m=" + std::to_string(a.m) + " k=" +
                                std::to_string(a.k) + " ldx=" + std::to_string(a.ldx) +
                                " ldw=" + std::to_string(a.ldw));
  if (a.unroll != 2 && a.unroll != 4)
    throw std::invalid_argument("gemv: unroll (loads per row in flight per lane) must be 2 or 4, got " +
                                std::to_string(a.unroll));
  switch (a.out) {
    case gemm_out::f32: return gemv_do_u<out_f32>(op, a, s);
    case gemm_out::swiglu: return gemv_do_u<out_swiglu>(op, a, s);
    case gemm_out::bf16: break;
  }
  return gemv_do_u<out_bf16>(op, a, s);
}
}  // namespace

void gemv(const gemm_args& a, stream_t s) {
  if (a.m == 0) {
    check_args(a);
    return;
  }
  gemv_dispatch(gemv_op::launch, a, as_stream(s));
}

int gemv_planned_k_split(const gemm_args& a) { return gemv_dispatch(gemv_op::k_split, a, nullptr); }
int gemv_resident_blocks(const gemm_args& a) { return gemv_dispatch(gemv_op::resident, a, nullptr); }

void gemm(blas_handle_t h, const gemm_args& a, stream_t s, gemm_impl impl) {
  if (gemm_resolve(a, impl) == gemm_impl::gemv) gemv(a, s);
  else gemm_cublas(h, a, s);
}

}  // namespace specpipe::kernels::cuda
