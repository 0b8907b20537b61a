// Causal prefill attention on the tensor cores through cuBLAS (see
// attention.hpp): per KV head, S = scale * Q K^T for its G query heads (one
// strided-batched bf16 GEMM, f32 out), a masked softmax row by row into bf16
// P, then O = P V (a second batched GEMM, bf16 out). The n x L scores go
// through device memory, which costs heads * rows * L * 12 bytes per pass
// (written and read once as f32, once as bf16): for a 512-token chunk at 2k
// keys and 32 heads about 0.4 GB, ~0.1 ms, against the ~10x longer CUDA-core
// flash kernel it replaces for prefill (NOTES.md, "prefill v2").
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda {
namespace {

using detail::bf16;

constexpr int sm_threads = 256;
constexpr float log2e = 1.4426950408889634f;

__device__ __forceinline__ float block_reduce(float v, float* tmp, bool is_max) {
  v = is_max ? detail::warp_max(v) : detail::warp_sum(v);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // tmp may still be read by the previous reduction
  if (lane == 0) tmp[w] = v;
  __syncthreads();
  float r = is_max ? -INFINITY : 0.f;
#pragma unroll
  for (int i = 0; i < sm_threads / 32; ++i) r = is_max ? fmaxf(r, tmp[i]) : r + tmp[i];
  return r;
}

// Row r of head h: keys 0 .. q0 + r attend (q0 = position of the pass's first
// query); P = softmax over them, 0 beyond. S already carries the scale.
__global__ void __launch_bounds__(sm_threads)
    causal_softmax_kernel(const float* __restrict__ s, bf16* __restrict__ p, int rows, std::int64_t keys,
                          std::int64_t ld, std::int64_t q0) {
  __shared__ float tmp[sm_threads / 32];
  const std::int64_t row = std::int64_t(blockIdx.y) * rows + blockIdx.x;
  const float* sr = s + row * ld;
  bf16* pr = p + row * ld;
  const std::int64_t last = q0 + blockIdx.x + 1;
  const std::int64_t valid = last < keys ? last : keys;
  float m = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < valid; j += sm_threads) m = fmaxf(m, sr[j]);
  m = block_reduce(m, tmp, true);
  float l = 0.f;
  for (std::int64_t j = threadIdx.x; j < valid; j += sm_threads) l += exp2f((sr[j] - m) * log2e);
  l = block_reduce(l, tmp, false);
  const float inv = 1.f / l;
  for (std::int64_t j = threadIdx.x; j < keys; j += sm_threads)
    pr[j] = __float2bfloat16(j < valid ? exp2f((sr[j] - m) * log2e) * inv : 0.f);
}

// Rows of S and P start 16-byte aligned (the tensor-core paths want it).
std::int64_t padded(std::int64_t keys) { return (keys + 7) / 8 * 8; }

void check(const prefill_attention_args& a) {
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    throw std::invalid_argument("prefill_attention_cublas: n_heads " + std::to_string(a.n_heads) +
                                " is not a multiple of n_kv_heads " + std::to_string(a.n_kv_heads));
  if (a.pos0 < 0 || a.pos0 + a.n > a.capacity)
    throw std::invalid_argument("prefill_attention_cublas: positions up to " + std::to_string(a.pos0 + a.n) +
                                " exceed the capacity " + std::to_string(a.capacity));
  if (a.head_dim <= 0 || a.head_dim % 8 != 0)
    throw std::invalid_argument("prefill_attention_cublas: head_dim " + std::to_string(a.head_dim) +
                                " is not a positive multiple of 8");
}

}  // namespace

std::int64_t prefill_attention_cublas_rows(const prefill_attention_args& a, std::size_t scratch_bytes) {
  const std::int64_t keys = a.pos0 + a.n;
  const std::size_t per_row = std::size_t(a.n_heads) * std::size_t(padded(keys)) * (sizeof(float) + sizeof(bf16));
  return std::min<std::int64_t>(a.n, std::int64_t(scratch_bytes / std::max<std::size_t>(per_row, 1)));
}

bool prefill_attention_cublas(blas_handle_t h, const prefill_attention_args& a, void* scratch,
                              std::size_t scratch_bytes, stream_t s) {
  if (a.n <= 0) return true;
  check(a);
  const std::int64_t max_rows = prefill_attention_cublas_rows(a, scratch_bytes);
  if (max_rows < std::min<std::int64_t>(a.n, 16)) return false;  // too thin to pay off: the caller falls back
  const cublasHandle_t handle = as_blas(h);
  CUBLAS_CHECK(cublasSetStream(handle, as_stream(s)));
  const int G = a.n_heads / a.n_kv_heads;
  const std::int64_t D = a.head_dim;
  const auto* q = reinterpret_cast<const bf16*>(a.q);
  const auto* kc = reinterpret_cast<const bf16*>(a.k_cache);
  const auto* vc = reinterpret_cast<const bf16*>(a.v_cache);
  auto* out = reinterpret_cast<bf16*>(a.out);
  for (std::int64_t i0 = 0; i0 < a.n; i0 += max_rows) {
    const int rows = int(std::min<std::int64_t>(max_rows, a.n - i0));
    const std::int64_t keys = a.pos0 + i0 + rows;  // the pass's last query sees them all
    const std::int64_t ld = padded(keys);
    auto* sbuf = static_cast<float*>(scratch);
    auto* pbuf = reinterpret_cast<bf16*>(sbuf + std::size_t(a.n_heads) * std::size_t(rows) * std::size_t(ld));
    const long long s_stride = (long long)rows * ld;
    for (int kh = 0; kh < a.n_kv_heads; ++kh) {
      const bf16* kb = kc + (std::int64_t(a.slot) * a.n_kv_heads + kh) * a.capacity * D;
      const bf16* qb = q + i0 * a.ld_q + std::int64_t(kh) * G * D;
      float* sb = sbuf + std::int64_t(kh) * G * s_stride;
      // Column-major: S^T (keys x rows, ld) = K (as D x keys)^T Q^T (D x rows, ld ld_q);
      // K is shared by the group's G heads (stride 0), Q and S advance per head.
      const float alpha = a.scale, beta = 0.f;
      CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(keys), rows, int(D), &alpha, kb,
                                              CUDA_R_16BF, int(D), 0, qb, CUDA_R_16BF, int(a.ld_q), (long long)D,
                                              &beta, sb, CUDA_R_32F, int(ld), s_stride, G, CUBLAS_COMPUTE_32F,
                                              CUBLAS_GEMM_DEFAULT));
    }
    causal_softmax_kernel<<<dim3(unsigned(rows), unsigned(a.n_heads)), sm_threads, 0, as_stream(s)>>>(
        sbuf, pbuf, rows, keys, ld, a.pos0 + i0);
    CUDA_CHECK_LAUNCH();
    for (int kh = 0; kh < a.n_kv_heads; ++kh) {
      const bf16* vb = vc + (std::int64_t(a.slot) * a.n_kv_heads + kh) * a.capacity * D;
      const bf16* pb = pbuf + std::int64_t(kh) * G * s_stride;
      bf16* ob = out + i0 * a.ld_out + std::int64_t(kh) * G * D;
      // O^T (D x rows, ld ld_out) = V^T (D x keys, ld D) P^T (keys x rows, ld).
      const float alpha = 1.f, beta = 0.f;
      CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(D), rows, int(keys), &alpha, vb,
                                              CUDA_R_16BF, int(D), 0, pb, CUDA_R_16BF, int(ld), s_stride, &beta,
                                              ob, CUDA_R_16BF, int(a.ld_out), (long long)D, G, CUBLAS_COMPUTE_32F,
                                              CUBLAS_GEMM_DEFAULT));
    }
  }
  return true;
}

}  // namespace specpipe::kernels::cuda
