// Flash-decoding over the full bf16 KV cache (see attention.hpp and NOTES.md).
//
// Block = (split, KV head, sequence), 256 threads. Key tiles of T=64 rows of K
// and V are brought into shared memory with 16-byte cp.async copies, two
// stages deep, so the next tile streams in while this one is computed. All G
// query heads of the GQA group are served from the same tile: the cache is
// read from device memory exactly once per step.
//
// Scores live in the log2 domain: q is pre-scaled by scale*log2(e), so the
// online softmax (Milakov & Gimelshein 2018; FlashAttention-2 Alg. 1) uses exp2:
//   m' = max(m, max_j s_j),  alpha = 2^(m - m'),  l' = alpha l + sum_j 2^(s_j - m'),
//   o' = alpha o + sum_j 2^(s_j - m') v_j.
// Each split writes o/l, m and l; the combine kernel merges splits with
// weights l_s 2^(m_s - M) (Dao et al., Flash-Decoding, 2023).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/split_merge.cuh"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda {
namespace {

using detail::bf16;

constexpr int threads = 256;
constexpr int tile = 64;                    // keys per tile
constexpr int dsplit = threads / tile;      // threads sharing one key's dot product
constexpr float log2e = 1.4426950408889634f;

template <int D, int G>
struct decode_layout {
  static constexpr int kpitch = D + 8;  // 16-byte pad: conflict-free row-per-thread reads
  static constexpr int chunks = D / 8;  // 16-byte chunks per row
  static constexpr int rows = threads / chunks;  // PV: thread rows (16 for D=128)
  static_assert(rows % G == 0, "group size must divide the PV thread rows");
  static constexpr int ksplit = rows / G;       // PV: key groups per head
  static constexpr int keys_per_group = tile / ksplit;
  static constexpr int pairs = G * tile;        // (head, key) scores per tile
  static constexpr int pairs_per_thread = (pairs + threads - 1) / threads;
  static constexpr std::size_t q_bytes = sizeof(float) * G * D;
  static constexpr std::size_t k_bytes = sizeof(bf16) * 2 * tile * kpitch;
  static constexpr std::size_t v_bytes = sizeof(bf16) * 2 * tile * D;
  static constexpr std::size_t red_bytes = sizeof(float) * dsplit * G * tile;
  static constexpr std::size_t small_bytes = sizeof(float) * (G * (tile / 32) + 3 * G);
  static constexpr std::size_t smem = q_bytes + k_bytes + v_bytes + red_bytes + small_bytes;
  static_assert(sizeof(float) * rows * D <= k_bytes, "final reduction reuses the K tiles");
};

using detail::cp_async16;  // with valid false: zero-fill, never read past the sequence
using detail::cp_async_commit;
using detail::cp_async_wait;

template <int D, int G>
__global__ void __launch_bounds__(threads)
    decode_attention_kernel(decode_attention_args a) {
  using L = decode_layout<D, G>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* q_s = reinterpret_cast<float*>(smem_raw);
  bf16* k_s = reinterpret_cast<bf16*>(smem_raw + L::q_bytes);
  bf16* v_s = reinterpret_cast<bf16*>(smem_raw + L::q_bytes + L::k_bytes);
  float* red = reinterpret_cast<float*>(smem_raw + L::q_bytes + L::k_bytes + L::v_bytes);
  float* wmax = red + dsplit * G * tile;
  float* head_m = wmax + G * (tile / 32);
  float* head_alpha = head_m + G;
  float* head_l = head_alpha + G;

  // As a dependent launch: q (and the cache row) come from the RoPE kernel,
  // and the partials below are what the previous layer's combine read.
  detail::grid_dependency_wait();
  const int split = blockIdx.x, kh = blockIdx.y, b = blockIdx.z;
  const int t = threadIdx.x;
  const std::int64_t len = a.lens[b];
  const std::int64_t slot = a.slots[b];
  // Every sequence is cut into (up to) `splits` equal runs of whole tiles, so a
  // ragged batch still spreads every sequence over the grid.
  const std::int64_t len_tiles = (len + tile - 1) / tile;
  const std::int64_t eff = a.splits < len_tiles ? a.splits : len_tiles;
  const std::int64_t chunk = ((len + eff - 1) / eff + tile - 1) / tile * tile;
  const std::int64_t start = std::int64_t(split) * chunk;
  const std::int64_t end = len < start + chunk ? len : start + chunk;

  const std::int64_t bh0 = std::int64_t(b) * a.n_heads + std::int64_t(kh) * G;
  float* part_o = a.partial;
  float* part_ml = a.partial + std::int64_t(a.batch) * a.n_heads * a.splits * D;
  if (split >= eff || start >= end) {
    if (t < G) {
      part_ml[((bh0 + t) * a.splits + split) * 2 + 0] = -INFINITY;
      part_ml[((bh0 + t) * a.splits + split) * 2 + 1] = 0.f;
    }
    return;
  }

  const bf16* kbase = reinterpret_cast<const bf16*>(a.k_cache) + (slot * a.n_kv_heads + kh) * a.capacity * D;
  const bf16* vbase = reinterpret_cast<const bf16*>(a.v_cache) + (slot * a.n_kv_heads + kh) * a.capacity * D;

  auto load_tile = [&](std::int64_t p0, int buf) {
#pragma unroll
    for (int i = 0; i < tile * L::chunks / threads; ++i) {
      const int c = t + i * threads;
      const int j = c / L::chunks;
      const int cc = c - j * L::chunks;
      const bool valid = p0 + j < end;
      const std::int64_t off = valid ? (p0 + j) * D + cc * 8 : 0;
      cp_async16(k_s + (buf * tile + j) * L::kpitch + cc * 8, kbase + off, valid);
      cp_async16(v_s + (buf * tile + j) * D + cc * 8, vbase + off, valid);
    }
  };

  const std::int64_t ntiles = (end - start + tile - 1) / tile;
  load_tile(start, 0);
  cp_async_commit();

  const bf16* qrow = reinterpret_cast<const bf16*>(a.q) + std::int64_t(b) * a.ld_q + std::int64_t(kh) * G * D;
  const float qscale = a.scale * log2e;
  for (int i = t; i < G * D; i += threads) q_s[i] = __bfloat162float(qrow[i]) * qscale;
  if (t < G) head_m[t] = -INFINITY;

  float l_part[L::pairs_per_thread];
#pragma unroll
  for (int i = 0; i < L::pairs_per_thread; ++i) l_part[i] = 0.f;

  // PV ownership: 8 output dims (one 16-byte chunk) of one head, over one key group.
  const int pv_c = t % L::chunks;
  const int pv_r = t / L::chunks;
  const int pv_g = pv_r % G;
  const int pv_ks = pv_r / G;
  float acc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = 0.f;

  // QK ownership: one key, one of `dsplit` slices of the head dimension.
  const int qk_j = t % tile;
  const int qk_part = t / tile;
  constexpr int slice = D / dsplit;

  for (std::int64_t it = 0; it < ntiles; ++it) {
    const int buf = int(it & 1);
    const std::int64_t p0 = start + it * tile;
    if (it + 1 < ntiles) {
      load_tile(p0 + tile, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    {  // partial dot products q_g . k_j over this thread's slice
      float s[G];
#pragma unroll
      for (int g = 0; g < G; ++g) s[g] = 0.f;
      const bf16* krow = k_s + (buf * tile + qk_j) * L::kpitch + qk_part * slice;
      const float* qs = q_s + qk_part * slice;
#pragma unroll
      for (int cc = 0; cc < slice / 8; ++cc) {
        float kf[8];
        detail::bf16x8_to_f32(*reinterpret_cast<const uint4*>(krow + cc * 8), kf);
#pragma unroll
        for (int g = 0; g < G; ++g)
#pragma unroll
          for (int e = 0; e < 8; ++e) s[g] = fmaf(kf[e], qs[g * D + cc * 8 + e], s[g]);
      }
#pragma unroll
      for (int g = 0; g < G; ++g) red[(qk_part * G + g) * tile + qk_j] = s[g];
    }
    __syncthreads();

    float sv[L::pairs_per_thread];
#pragma unroll
    for (int i = 0; i < L::pairs_per_thread; ++i) {
      const int idx = t + i * threads;
      sv[i] = -INFINITY;
      if (idx < L::pairs) {  // warp-uniform: pairs is a multiple of 32
        const int g = idx / tile, j = idx % tile;
        float s = 0.f;
#pragma unroll
        for (int p = 0; p < dsplit; ++p) s += red[(p * G + g) * tile + j];
        sv[i] = p0 + j < end ? s : -INFINITY;
        const float wm = detail::warp_max(sv[i]);
        if ((t & 31) == 0) wmax[g * (tile / 32) + j / 32] = wm;
      }
    }
    __syncthreads();
    if (t < G) {
      float tmax = -INFINITY;
#pragma unroll
      for (int w = 0; w < tile / 32; ++w) tmax = fmaxf(tmax, wmax[t * (tile / 32) + w]);
      const float m_old = head_m[t];
      const float m_new = fmaxf(m_old, tmax);  // finite: every tile holds a valid key
      head_alpha[t] = exp2f(m_old - m_new);
      head_m[t] = m_new;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < L::pairs_per_thread; ++i) {
      const int idx = t + i * threads;
      if (idx < L::pairs) {
        const int g = idx / tile, j = idx % tile;
        const float p = exp2f(sv[i] - head_m[g]);
        l_part[i] = l_part[i] * head_alpha[g] + p;
        red[g * tile + j] = p;  // slice 0 of this (g, j): read above by this thread only
      }
    }
    __syncthreads();

    {  // o_g += sum_j p_gj v_j over this thread's key group
      const float alpha = head_alpha[pv_g];
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] *= alpha;
      const int j0 = pv_ks * L::keys_per_group;
#pragma unroll 4
      for (int j = j0; j < j0 + L::keys_per_group; ++j) {
        const float p = red[pv_g * tile + j];
        float vf[8];
        detail::bf16x8_to_f32(*reinterpret_cast<const uint4*>(v_s + (buf * tile + j) * D + pv_c * 8), vf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] = fmaf(p, vf[e], acc[e]);
      }
    }
    __syncthreads();
  }

  // Sum l over the keys and o over the key groups (deterministic order).
  float* lred = red + G * tile;
#pragma unroll
  for (int i = 0; i < L::pairs_per_thread; ++i) {
    const int idx = t + i * threads;
    if (idx < L::pairs) lred[idx] = l_part[i];
  }
  float* fin = reinterpret_cast<float*>(k_s);
#pragma unroll
  for (int e = 0; e < 8; ++e) fin[pv_r * D + pv_c * 8 + e] = acc[e];
  __syncthreads();
  if (t < G) {
    float l = 0.f;
    for (int j = 0; j < tile; ++j) l += lred[t * tile + j];
    head_l[t] = l;
  }
  __syncthreads();
  for (int idx = t; idx < G * D; idx += threads) {
    const int g = idx / D, d = idx % D;
    float o = 0.f;
#pragma unroll
    for (int ks = 0; ks < L::ksplit; ++ks) o += fin[(ks * G + g) * D + d];
    part_o[((bh0 + g) * a.splits + split) * D + d] = o / head_l[g];
  }
  if (t < G) {
    part_ml[((bh0 + t) * a.splits + split) * 2 + 0] = head_m[t];
    part_ml[((bh0 + t) * a.splits + split) * 2 + 1] = head_l[t];
  }
}

// One block of D threads per (head, sequence): the staged split merge.
template <int D>
__global__ void decode_combine_kernel(decode_attention_args a) {
  extern __shared__ float wt_s[];  // [splits]
  detail::grid_dependency_wait();
  detail::allow_dependent_launch();  // the o_proj GEMV may start streaming W
  const int h = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
  const std::int64_t bh = std::int64_t(b) * a.n_heads + h;
  const auto [m, num, den] = detail::merge_splits_staged<D>(
      a.partial + bh * a.splits * D,
      a.partial + std::int64_t(a.batch) * a.n_heads * a.splits * D + bh * a.splits * 2, a.splits, d, wt_s);
  reinterpret_cast<bf16*>(a.out)[std::int64_t(b) * a.ld_out + std::int64_t(h) * D + d] =
      __float2bfloat16(num / den);
}

template <int D, int G>
void launch(const decode_attention_args& a, cudaStream_t s) {
  using L = decode_layout<D, G>;
  static const bool configured = [] {
    CUDA_CHECK(cudaFuncSetAttribute(decode_attention_kernel<D, G>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(L::smem)));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned(a.splits), unsigned(a.n_kv_heads), unsigned(a.batch));
  detail::launch_kernel(decode_attention_kernel<D, G>, grid, dim3(threads), L::smem, s, a.dependent, a);
  CUDA_CHECK_LAUNCH();
  detail::launch_kernel(decode_combine_kernel<D>, dim3(unsigned(a.n_heads), unsigned(a.batch)), dim3(D),
                        std::size_t(a.splits) * sizeof(float), s, a.dependent, a);
  CUDA_CHECK_LAUNCH();
}

template <int D>
void launch_group(const decode_attention_args& a, int group, cudaStream_t s) {
  switch (group) {
    case 1: return launch<D, 1>(a, s);
    case 2: return launch<D, 2>(a, s);
    case 4: return launch<D, 4>(a, s);
    case 8: return launch<D, 8>(a, s);
    case 16: return launch<D, 16>(a, s);
    default: break;
  }
  throw std::invalid_argument("decode_attention: GQA group " + std::to_string(group) +
                              " is not one of 1, 2, 4, 8, 16");
}

}  // namespace

std::size_t decode_attention_scratch_floats(int batch, int n_heads, int head_dim, int max_splits) {
  return std::size_t(batch) * std::size_t(n_heads) * std::size_t(max_splits) * std::size_t(head_dim + 2);
}

namespace {
struct split_shape {
  std::int64_t chunk_tiles, active;
};
// Each sequence is cut into equal runs of whole tiles (as the kernel does), so
// `splits` may leave some splits empty.
split_shape split_of(std::int64_t tiles, int splits) {
  const std::int64_t chunk = (tiles + splits - 1) / splits;
  return {chunk, (tiles + chunk - 1) / chunk};
}
}  // namespace

double decode_attention_utilization(int batch, int n_kv_heads, std::int64_t max_len, int sm_count,
                                    int blocks_per_sm, int splits) {
  const std::int64_t pairs = std::int64_t(batch) * n_kv_heads;
  const std::int64_t slots = std::int64_t(std::max(sm_count, 1)) * std::max(blocks_per_sm, 1);
  const std::int64_t tiles = std::max<std::int64_t>(1, (max_len + tile - 1) / tile);
  const auto sh = split_of(tiles, std::max(splits, 1));
  const std::int64_t blocks = pairs * sh.active;
  const std::int64_t waves = (blocks + slots - 1) / slots;
  // Work per block ~ chunk_tiles; time ~ waves * chunk_tiles.
  return double(pairs * tiles) / double(waves * slots * sh.chunk_tiles);
}

int decode_attention_splits(int batch, int n_kv_heads, std::int64_t max_len, int sm_count,
                            int max_splits, int blocks_per_sm) {
  const std::int64_t tiles = std::max<std::int64_t>(1, (max_len + tile - 1) / tile);
  const int cap = int(std::max<std::int64_t>(1, std::min<std::int64_t>(max_splits, tiles / 2)));
  int best = 1;
  double best_score = -1;
  for (int s = 1; s <= cap; ++s) {
    const double score = decode_attention_utilization(batch, n_kv_heads, max_len, sm_count, blocks_per_sm, s);
    if (score > best_score + 1e-9) {
      best_score = score;
      best = s;
    }
  }
  return best;
}

namespace {
template <int D, int G>
int blocks_per_sm_of() {
  using L = decode_layout<D, G>;
  CUDA_CHECK(cudaFuncSetAttribute(decode_attention_kernel<D, G>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(L::smem)));
  int n = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_attention_kernel<D, G>, threads, L::smem));
  return std::max(n, 1);
}
template <int D>
int blocks_per_sm_group(int group) {
  switch (group) {
    case 1: return blocks_per_sm_of<D, 1>();
    case 2: return blocks_per_sm_of<D, 2>();
    case 4: return blocks_per_sm_of<D, 4>();
    case 8: return blocks_per_sm_of<D, 8>();
    case 16: return blocks_per_sm_of<D, 16>();
    default: break;
  }
  throw std::invalid_argument("decode_attention: GQA group " + std::to_string(group) +
                              " is not one of 1, 2, 4, 8, 16");
}
}  // namespace

int decode_attention_blocks_per_sm(int n_heads, int n_kv_heads, int head_dim) {
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    throw std::invalid_argument("decode_attention: n_heads " + std::to_string(n_heads) +
                                " is not a multiple of n_kv_heads " + std::to_string(n_kv_heads));
  const int group = n_heads / n_kv_heads;
  if (head_dim == 128) return blocks_per_sm_group<128>(group);
  if (head_dim == 64) return blocks_per_sm_group<64>(group);
  throw std::invalid_argument("decode_attention: head_dim " + std::to_string(head_dim) + " is not 64 or 128");
}

void decode_attention(const decode_attention_args& a, stream_t s) {
  if (a.batch <= 0) return;
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    throw std::invalid_argument("decode_attention: n_heads " + std::to_string(a.n_heads) +
                                " is not a multiple of n_kv_heads " + std::to_string(a.n_kv_heads));
  if (a.splits < 1) throw std::invalid_argument("decode_attention: splits must be >= 1");
  const int group = a.n_heads / a.n_kv_heads;
  if (a.head_dim == 128) return launch_group<128>(a, group, as_stream(s));
  if (a.head_dim == 64) return launch_group<64>(a, group, as_stream(s));
  throw std::invalid_argument("decode_attention: head_dim " + std::to_string(a.head_dim) +
                              " is not 64 or 128");
}

}  // namespace specpipe::kernels::cuda
