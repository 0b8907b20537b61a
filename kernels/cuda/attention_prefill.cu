// Causal prefill attention over the cache (flash-attention tiling, CUDA cores).
//
// Block = (16 queries, one query head), 4 warps of 4 queries each. Key/value
// tiles of 64 rows are staged in shared memory as f32 (K rows padded by one
// word so lane-per-key reads are conflict-free); each warp keeps an online
// softmax per query (log2 domain, as in attention_decode.cu) and never forms
// the n x L score matrix. Correctness first: no tensor cores (NOTES.md).
#include <cuda_bf16.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda {
namespace {

using detail::bf16;

constexpr int pf_threads = 128;
constexpr int pf_warps = pf_threads / 32;
constexpr int q_per_warp = 4;
constexpr int q_per_block = pf_warps * q_per_warp;
constexpr int pf_tile = 64;
constexpr float pf_log2e = 1.4426950408889634f;

template <int D>
constexpr std::size_t prefill_smem() {
  return sizeof(float) * (pf_tile * (D + 1) + pf_tile * D + q_per_block * D);
}

template <int D>
__global__ void __launch_bounds__(pf_threads) prefill_attention_kernel(prefill_attention_args a) {
  extern __shared__ float pf_smem[];
  float* k_s = pf_smem;                         // [tile][D + 1]
  float* v_s = k_s + pf_tile * (D + 1);         // [tile][D]
  float* q_s = v_s + pf_tile * D;               // [q_per_block][D]
  constexpr int per_lane = D / 32;

  const int h = blockIdx.y;
  const int group = a.n_heads / a.n_kv_heads;
  const int kh = h / group;
  const std::int64_t q0 = std::int64_t(blockIdx.x) * q_per_block;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float qscale = a.scale * pf_log2e;

  for (int i = threadIdx.x; i < q_per_block * D; i += pf_threads) {
    const std::int64_t qi = q0 + i / D;
    const float v = qi < a.n ? __bfloat162float(reinterpret_cast<const bf16*>(a.q)[qi * a.ld_q + std::int64_t(h) * D + i % D]) : 0.f;
    q_s[i] = v * qscale;
  }

  const bf16* kbase = reinterpret_cast<const bf16*>(a.k_cache) +
                      (std::int64_t(a.slot) * a.n_kv_heads + kh) * a.capacity * D;
  const bf16* vbase = reinterpret_cast<const bf16*>(a.v_cache) +
                      (std::int64_t(a.slot) * a.n_kv_heads + kh) * a.capacity * D;
  const std::int64_t q_last = (q0 + q_per_block < a.n ? q0 + q_per_block : a.n) - 1;
  const std::int64_t kv_end = a.pos0 + q_last + 1;  // keys the block's last query sees

  float m[q_per_warp], l[q_per_warp], acc[q_per_warp][per_lane];
#pragma unroll
  for (int q = 0; q < q_per_warp; ++q) {
    m[q] = -INFINITY;
    l[q] = 0.f;
#pragma unroll
    for (int i = 0; i < per_lane; ++i) acc[q][i] = 0.f;
  }

  for (std::int64_t k0 = 0; k0 < kv_end; k0 += pf_tile) {
    __syncthreads();  // previous tile fully consumed (and q_s written on the first pass)
    for (int i = threadIdx.x; i < pf_tile * D / 8; i += pf_threads) {
      const int j = i / (D / 8), c = (i % (D / 8)) * 8;
      float kf[8], vf[8];
      if (k0 + j < kv_end) {
        detail::bf16x8_to_f32(*reinterpret_cast<const uint4*>(kbase + (k0 + j) * D + c), kf);
        detail::bf16x8_to_f32(*reinterpret_cast<const uint4*>(vbase + (k0 + j) * D + c), vf);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) kf[e] = vf[e] = 0.f;
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        k_s[j * (D + 1) + c + e] = kf[e];
        v_s[j * D + c + e] = vf[e];
      }
    }
    __syncthreads();

#pragma unroll
    for (int q = 0; q < q_per_warp; ++q) {
      const int ql = warp * q_per_warp + q;
      const std::int64_t qi = q0 + ql;
      if (qi >= a.n) break;  // warp-uniform
      const std::int64_t limit = a.pos0 + qi;  // last key this query sees
      const float* qv = q_s + ql * D;
      float s0 = 0.f, s1 = 0.f;
#pragma unroll 8
      for (int d = 0; d < D; ++d) {
        s0 = fmaf(qv[d], k_s[lane * (D + 1) + d], s0);
        s1 = fmaf(qv[d], k_s[(lane + 32) * (D + 1) + d], s1);
      }
      if (k0 + lane > limit) s0 = -INFINITY;
      if (k0 + lane + 32 > limit) s1 = -INFINITY;
      const float m_new = fmaxf(m[q], detail::warp_max(fmaxf(s0, s1)));
      if (m_new == -INFINITY) continue;  // no visible key yet (cannot happen at k0 = 0)
      const float alpha = exp2f(m[q] - m_new);
      const float p0 = exp2f(s0 - m_new), p1 = exp2f(s1 - m_new);
      l[q] = l[q] * alpha + detail::warp_sum(p0 + p1);
      m[q] = m_new;
#pragma unroll
      for (int i = 0; i < per_lane; ++i) acc[q][i] *= alpha;
      for (int j = 0; j < pf_tile; ++j) {
        const float p = __shfl_sync(0xffffffffu, j < 32 ? p0 : p1, j & 31);
#pragma unroll
        for (int i = 0; i < per_lane; ++i) acc[q][i] = fmaf(p, v_s[j * D + lane + 32 * i], acc[q][i]);
      }
    }
  }

#pragma unroll
  for (int q = 0; q < q_per_warp; ++q) {
    const std::int64_t qi = q0 + warp * q_per_warp + q;
    if (qi >= a.n) break;
    bf16* o = reinterpret_cast<bf16*>(a.out) + qi * a.ld_out + std::int64_t(h) * D;
#pragma unroll
    for (int i = 0; i < per_lane; ++i) o[lane + 32 * i] = __float2bfloat16(acc[q][i] / l[q]);
  }
}

template <int D>
void launch_prefill(const prefill_attention_args& a, cudaStream_t s) {
  static const bool configured = [] {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel<D>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(prefill_smem<D>())));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned((a.n + q_per_block - 1) / q_per_block), unsigned(a.n_heads));
  prefill_attention_kernel<D><<<grid, pf_threads, prefill_smem<D>(), s>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void prefill_attention(const prefill_attention_args& a, stream_t s) {
  if (a.n <= 0) return;
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    throw std::invalid_argument("prefill_attention: n_heads " + std::to_string(a.n_heads) +
                                " is not a multiple of n_kv_heads " + std::to_string(a.n_kv_heads));
  if (a.pos0 + a.n > a.capacity)
    throw std::invalid_argument("prefill_attention: positions up to " + std::to_string(a.pos0 + a.n) +
                                " exceed the cache capacity " + std::to_string(a.capacity));
  if (a.head_dim == 128) return launch_prefill<128>(a, as_stream(s));
  if (a.head_dim == 64) return launch_prefill<64>(a, as_stream(s));
  throw std::invalid_argument("prefill_attention: head_dim " + std::to_string(a.head_dim) +
                              " is not 64 or 128");
}

}  // namespace specpipe::kernels::cuda
