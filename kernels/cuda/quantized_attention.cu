// Flash-decoding straight over the packed KIVI / hierarchical codes (see
// quantized_attention.hpp and NOTES.md, "quantized decode attention").
//
// Block = (split, KV head, sequence), 256 threads. A split is a run of work
// tiles: packed tiles of 128 tokens (128 / G whole key groups) and window
// tiles of 32 bf16 rows. Each tile's bytes (code planes, f16 scales/zeros or
// window rows) are brought to shared memory with cp.async, two stages deep.
//
// Scores in the log2 domain (q pre-scaled by scale * log2 e), online softmax
// with the same recurrences as attention_decode.cu:
//   m' = max(m, max_j s_j), alpha = 2^(m - m'), l' = alpha l + sum_j 2^(s_j - m'),
//   o' = alpha o + sum_j 2^(s_j - m') v^_j.
// Keys: k^_cj = z_c + s_c U_cj [+ s_c (L_cj - 8) / 16] (QuantSpec sec. 4.1),
// dequantized once per (channel, token) and shared by the G query heads.
// Values: sum_j p_j v^_jc = sum_j (p_j s_j) U_jc [+ (p_j s_j / 16) L_jc]
//   + sum_j p_j (z_j [- s_j / 2]): the zero term is one scalar per thread.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/quantized_attention.hpp"
#include "kernels/cuda/split_merge.cuh"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda {
namespace {

using detail::bf16;

constexpr int threads = 256;
constexpr int ptile = 128;  // packed tokens per tile
constexpr int wtile = 32;   // window rows per tile
constexpr float log2e = 1.4426950408889634f;

// Shapes a launch needs at run time (the template fixes D, GQA group, bits
// and whether the lower plane is read).
struct shape {
  int log2_group = 6;
  int block_bytes = 0;   // one (group, head) key block of one plane
  int chan_bytes = 0;    // one channel's G codes
  int vrow_bytes = 0;    // one value row of one plane
  int ngroups = 1;       // value groups per row
  bool vs_span = false;  // one value group: stage all heads' scales of the tile
  int vs_stride = 0, vs_words = 0;  // staged f16 per token; 4-byte words per token (row mode)
  // Stage carve-up (bytes from the stage start).
  int off_kl = 0, off_ks = 0, off_kz = 0, off_vc = 0, off_vl = 0, off_vs = 0, off_vz = 0, stage_bytes = 0;
  std::int64_t seq_k_codes = 0, seq_v_codes = 0, seq_k_scales = 0, seq_v_scales = 0, seq_window = 0;
  std::int64_t packed_tiles = 0, tiles = 0;
};

int round16(int x) { return (x + 15) / 16 * 16; }

shape make_shape(const quant_decode_args& a, bool lower) {
  shape s;
  int lg = 0;
  while ((1 << lg) < a.group) ++lg;
  s.log2_group = lg;
  const int d = a.head_dim, b = a.bits;
  s.chan_bytes = a.group * b / 8;
  s.block_bytes = d * s.chan_bytes;
  s.vrow_bytes = d * b / 8;
  s.ngroups = d / a.value_group;
  s.vs_span = s.ngroups == 1;
  s.vs_stride = s.vs_span ? a.n_kv_heads : s.ngroups;
  s.vs_words = s.ngroups / 2;
  const int tile_groups = ptile / a.group;
  const int kc = ptile * d * b / 8;  // one plane of the tile's keys
  const int vc = ptile * s.vrow_bytes;
  int off = round16(kc);
  s.off_kl = off;
  if (lower) off += round16(kc);
  s.off_ks = off;
  off += round16(tile_groups * d * 2);
  s.off_kz = off;
  off += round16(tile_groups * d * 2);
  s.off_vc = off;
  off += round16(vc);
  s.off_vl = off;
  if (lower) off += round16(vc);
  s.off_vs = off;
  off += round16(ptile * s.vs_stride * 2);
  s.off_vz = off;
  off += round16(ptile * s.vs_stride * 2);
  const int window = 2 * wtile * d * 2;  // K and V rows of a window tile
  s.stage_bytes = std::max(off, window);
  const std::int64_t groups = a.n_quant / a.group;
  s.seq_k_codes = a.seq_k_codes ? a.seq_k_codes : groups * a.n_kv_heads * s.block_bytes;
  s.seq_v_codes = a.seq_v_codes ? a.seq_v_codes : a.n_quant * a.n_kv_heads * s.vrow_bytes;
  s.seq_k_scales = a.seq_k_scales ? a.seq_k_scales : groups * a.n_kv_heads * d;
  s.seq_v_scales = a.seq_v_scales ? a.seq_v_scales : a.n_quant * a.n_kv_heads * s.ngroups;
  s.seq_window = a.seq_window ? a.seq_window : a.win_len * a.n_kv_heads * d;
  s.packed_tiles = (a.n_quant + ptile - 1) / ptile;
  s.tiles = s.packed_tiles + (a.win_len + wtile - 1) / wtile;
  return s;
}

template <int D, int GQ>
struct block_layout {
  static constexpr std::size_t q_bytes = sizeof(float) * GQ * D;
  static constexpr std::size_t sc_bytes = sizeof(float) * GQ * ptile;
  static constexpr std::size_t red_bytes = sizeof(float) * 2 * GQ * ptile;  // = 8 parts x GQ x wtile
  static constexpr std::size_t small_bytes = sizeof(float) * 4 * GQ;
  static constexpr int chunks = D / 8;          // PV: 8 output dims per thread
  static constexpr int rows = threads / chunks;  // PV thread rows
  static_assert(rows % GQ == 0, "GQA group must divide the PV thread rows");
  static constexpr int ksplit = rows / GQ;
  static std::size_t smem(int stage_bytes) {
    return 2 * std::size_t(stage_bytes) + q_bytes + sc_bytes + red_bytes + small_bytes;
  }
};

template <int N>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if constexpr (N == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(N));
}
using detail::cp_async_commit;
using detail::cp_async_wait;

// Exact float of a small unsigned code without the slow integer conversion:
// 2^23 + u has u in its mantissa.
__device__ __forceinline__ float code_f(unsigned u) { return __uint_as_float(u | 0x4B000000u) - 8388608.f; }
using detail::h2f;

template <int D, int GQ, int B, bool LOWER>
__global__ void __launch_bounds__(threads) quant_decode_kernel(quant_decode_args a, shape sh) {
  using L = block_layout<D, GQ>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* stage0 = smem_raw;
  float* q_s = reinterpret_cast<float*>(smem_raw + 2 * std::size_t(sh.stage_bytes));
  float* sc = q_s + GQ * D;
  float* red = sc + GQ * ptile;
  float* head_m = red + 2 * GQ * ptile;
  float* head_alpha = head_m + GQ;
  float* head_l = head_alpha + GQ;

  const int split = blockIdx.x, kh = blockIdx.y, b = blockIdx.z;
  const int t = threadIdx.x;
  const std::int64_t chunk = (sh.tiles + a.splits - 1) / a.splits;
  const std::int64_t first = std::int64_t(split) * chunk;
  const std::int64_t last = sh.tiles < first + chunk ? sh.tiles : first + chunk;

  const std::int64_t bh0 = std::int64_t(b) * a.n_heads + std::int64_t(kh) * GQ;
  float* part_o = a.partial;
  float* part_ml = a.partial + std::int64_t(a.batch) * a.n_heads * a.splits * D;
  if (first >= last) {
    if (t < GQ) {
      part_ml[((bh0 + t) * a.splits + split) * 2 + 0] = -INFINITY;
      part_ml[((bh0 + t) * a.splits + split) * 2 + 1] = 0.f;
    }
    return;
  }

  const std::uint8_t* kc_g = a.k_codes + b * sh.seq_k_codes;
  const std::uint8_t* kl_g = LOWER ? a.k_lower + b * sh.seq_k_codes : nullptr;
  const std::uint16_t* ks_g = a.k_scale + b * sh.seq_k_scales;
  const std::uint16_t* kz_g = a.k_zero + b * sh.seq_k_scales;
  const std::uint8_t* vc_g = a.v_codes + b * sh.seq_v_codes;
  const std::uint8_t* vl_g = LOWER ? a.v_lower + b * sh.seq_v_codes : nullptr;
  const std::uint16_t* vs_g = a.v_scale + b * sh.seq_v_scales;
  const std::uint16_t* vz_g = a.v_zero + b * sh.seq_v_scales;
  const bf16* wk_g = reinterpret_cast<const bf16*>(a.win_k) + b * sh.seq_window;
  const bf16* wv_g = reinterpret_cast<const bf16*>(a.win_v) + b * sh.seq_window;
  const int nkv = a.n_kv_heads;
  constexpr int vunit = D * B / 8 >= 16 ? 16 : 8;  // a value row is 8 bytes only at D=64, 1 bit

  auto tile_span = [&](std::int64_t tile, std::int64_t& p0, int& n) {
    if (tile < sh.packed_tiles) {
      p0 = tile * ptile;
      n = int(a.n_quant - p0 < ptile ? a.n_quant - p0 : ptile);
    } else {
      p0 = (tile - sh.packed_tiles) * wtile;
      n = int(a.win_len - p0 < wtile ? a.win_len - p0 : wtile);
    }
  };

  auto load_tile = [&](std::int64_t tile, int buf) {
    unsigned char* st = stage0 + buf * sh.stage_bytes;
    std::int64_t p0;
    int n;
    tile_span(tile, p0, n);
    if (tile >= sh.packed_tiles) {  // window rows: 16-byte chunks of K and V
      bf16* ks = reinterpret_cast<bf16*>(st);
      bf16* vs = ks + wtile * D;
      constexpr int per_row = D / 8;
      for (int c = t; c < n * per_row; c += threads) {
        const int j = c / per_row, cc = c - j * per_row;
        const std::int64_t off = ((p0 + j) * nkv + kh) * D + cc * 8;
        cp_async<16>(ks + j * D + cc * 8, wk_g + off);
        cp_async<16>(vs + j * D + cc * 8, wv_g + off);
      }
      return;
    }
    const int groups = n >> sh.log2_group;
    const std::int64_t g0 = p0 >> sh.log2_group;
    const int bchunks = sh.block_bytes / 16;
    for (int c = t; c < groups * bchunks; c += threads) {
      const int gi = c / bchunks, cc = c - gi * bchunks;
      const std::int64_t off = ((g0 + gi) * nkv + kh) * sh.block_bytes + cc * 16;
      cp_async<16>(st + gi * sh.block_bytes + cc * 16, kc_g + off);
      if constexpr (LOWER) cp_async<16>(st + sh.off_kl + gi * sh.block_bytes + cc * 16, kl_g + off);
    }
    constexpr int schunks = D * 2 / 16;
    for (int c = t; c < groups * schunks; c += threads) {
      const int gi = c / schunks, cc = c - gi * schunks;
      const std::int64_t off = ((g0 + gi) * nkv + kh) * D + cc * 8;
      cp_async<16>(st + sh.off_ks + gi * D * 2 + cc * 16, ks_g + off);
      cp_async<16>(st + sh.off_kz + gi * D * 2 + cc * 16, kz_g + off);
    }
    constexpr int vchunks = D * B / 8 / vunit;
    for (int c = t; c < n * vchunks; c += threads) {
      const int j = c / vchunks, cc = c - j * vchunks;
      const std::int64_t off = ((p0 + j) * nkv + kh) * (D * B / 8) + cc * vunit;
      cp_async<vunit>(st + sh.off_vc + j * (D * B / 8) + cc * vunit, vc_g + off);
      if constexpr (LOWER) cp_async<vunit>(st + sh.off_vl + j * (D * B / 8) + cc * vunit, vl_g + off);
    }
    if (sh.vs_span) {  // one f16 per (token, head): all heads of the tile's tokens, 16 bytes at a time
      const int bytes = n * nkv * 2;
      const std::int64_t off = p0 * nkv * 2;
      for (int c = t; c < bytes / 16; c += threads) {
        cp_async<16>(st + sh.off_vs + c * 16, reinterpret_cast<const unsigned char*>(vs_g) + off + c * 16);
        cp_async<16>(st + sh.off_vz + c * 16, reinterpret_cast<const unsigned char*>(vz_g) + off + c * 16);
      }
    } else {
      for (int c = t; c < n * sh.vs_words; c += threads) {
        const int j = c / sh.vs_words, w = c - j * sh.vs_words;
        const std::int64_t off = ((p0 + j) * nkv + kh) * sh.ngroups + w * 2;
        cp_async<4>(st + sh.off_vs + (j * sh.ngroups + w * 2) * 2, vs_g + off);
        cp_async<4>(st + sh.off_vz + (j * sh.ngroups + w * 2) * 2, vz_g + off);
      }
    }
  };

  load_tile(first, 0);
  cp_async_commit();

  const bf16* qrow = reinterpret_cast<const bf16*>(a.q) + std::int64_t(b) * a.ld_q + std::int64_t(kh) * GQ * D;
  const float qscale = a.scale * log2e;
  for (int i = t; i < GQ * D; i += threads) q_s[i] = __bfloat162float(qrow[i]) * qscale;
  if (t < GQ) {
    head_m[t] = -INFINITY;
    head_l[t] = 0.f;
  }

  // PV ownership: 8 output dims of one head over every ksplit-th key.
  const int pv_c = t % L::chunks;
  const int pv_r = t / L::chunks;
  const int pv_g = pv_r % GQ;
  const int pv_ks = pv_r / GQ;
  const int pv_vg = (pv_c * 8) / a.value_group;
  const int vs_col = sh.vs_span ? kh : pv_vg;
  float acc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = 0.f;
  float zsum = 0.f;

  for (std::int64_t tile = first; tile < last; ++tile) {
    const int buf = int((tile - first) & 1);
    if (tile + 1 < last) {
      load_tile(tile + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const unsigned char* st = stage0 + buf * sh.stage_bytes;
    std::int64_t p0;
    int n;
    tile_span(tile, p0, n);
    const bool packed = tile < sh.packed_tiles;
    const int width = packed ? ptile : wtile;

    if (packed) {  // scores: thread = (token, half of the channels)
      const int j = t % ptile, half = t / ptile;
      float s[GQ];
#pragma unroll
      for (int g = 0; g < GQ; ++g) s[g] = 0.f;
      if (j < n) {
        const int grp = j >> sh.log2_group, jj = j & ((1 << sh.log2_group) - 1);
        const int bit = jj * B;
        const unsigned char* kb = st + grp * sh.block_bytes + (bit >> 3);
        const int shift = bit & 7;
        const std::uint16_t* ksc = reinterpret_cast<const std::uint16_t*>(st + sh.off_ks) + grp * D;
        const std::uint16_t* kze = reinterpret_cast<const std::uint16_t*>(st + sh.off_kz) + grp * D;
#pragma unroll 8
        for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) {
          const float sc_c = h2f(ksc[c]);
          float code = code_f((unsigned(kb[c * sh.chan_bytes]) >> shift) & ((1u << B) - 1u));
          if constexpr (LOWER) {
            const float lo = code_f((unsigned(kb[sh.off_kl + c * sh.chan_bytes]) >> shift) & 15u);
            code += (lo - 8.f) * (1.f / 16.f);
          }
          const float k = fmaf(sc_c, code, h2f(kze[c]));
#pragma unroll
          for (int g = 0; g < GQ; ++g) s[g] = fmaf(q_s[g * D + c], k, s[g]);
        }
      }
#pragma unroll
      for (int g = 0; g < GQ; ++g) red[(half * GQ + g) * ptile + j] = s[g];
    } else {  // window scores: thread = (row, eighth of the channels)
      const int j = t % wtile, part = t / wtile;
      constexpr int slice = D / 8;
      float s[GQ];
#pragma unroll
      for (int g = 0; g < GQ; ++g) s[g] = 0.f;
      if (j < n) {
        const bf16* krow = reinterpret_cast<const bf16*>(st) + j * D + part * slice;
#pragma unroll
        for (int cc = 0; cc < slice / 8; ++cc) {
          float kf[8];
          detail::bf16x8_to_f32(*reinterpret_cast<const uint4*>(krow + cc * 8), kf);
#pragma unroll
          for (int g = 0; g < GQ; ++g)
#pragma unroll
            for (int e = 0; e < 8; ++e) s[g] = fmaf(kf[e], q_s[g * D + part * slice + cc * 8 + e], s[g]);
        }
      }
#pragma unroll
      for (int g = 0; g < GQ; ++g) red[(part * GQ + g) * wtile + j] = s[g];
    }
    __syncthreads();
    const int parts = packed ? 2 : 8;
    for (int idx = t; idx < GQ * width; idx += threads) {
      const int g = idx / width, j = idx - g * width;
      float s = 0.f;
      for (int p = 0; p < parts; ++p) s += red[(p * GQ + g) * width + j];
      sc[g * ptile + j] = j < n ? s : -INFINITY;
    }
    __syncthreads();
    // Online softmax, one warp per head.
    for (int g = t / 32; g < GQ; g += threads / 32) {
      const int lane = t & 31;
      float m = -INFINITY;
      for (int j = lane; j < width; j += 32) m = fmaxf(m, sc[g * ptile + j]);
      m = detail::warp_max(m);
      const float m_old = head_m[g];
      const float m_new = fmaxf(m_old, m);  // finite: every tile holds a valid key
      float l = 0.f;
      for (int j = lane; j < width; j += 32) {
        const float p = exp2f(sc[g * ptile + j] - m_new);
        sc[g * ptile + j] = p;
        l += p;
      }
      l = detail::warp_sum(l);
      __syncwarp();
      if (lane == 0) {
        const float alpha = exp2f(m_old - m_new);
        head_alpha[g] = alpha;
        head_l[g] = head_l[g] * alpha + l;
        head_m[g] = m_new;
      }
    }
    __syncthreads();
    {
      const float alpha = head_alpha[pv_g];
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] *= alpha;
      zsum *= alpha;
      const float* p_row = sc + pv_g * ptile;
      if (packed) {
        const std::uint16_t* vsc = reinterpret_cast<const std::uint16_t*>(st + sh.off_vs);
        const std::uint16_t* vze = reinterpret_cast<const std::uint16_t*>(st + sh.off_vz);
        for (int j = pv_ks; j < n; j += L::ksplit) {
          const float p = p_row[j];
          const float ps = p * h2f(vsc[j * sh.vs_stride + vs_col]);
          float z = h2f(vze[j * sh.vs_stride + vs_col]);
          const unsigned char* row = st + sh.off_vc + j * (D * B / 8) + pv_c * B;
          unsigned w;
          if constexpr (B == 1) w = *row;
          else if constexpr (B == 2) w = *reinterpret_cast<const std::uint16_t*>(row);
          else w = *reinterpret_cast<const unsigned*>(row);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[e] = fmaf(ps, code_f((w >> (e * B)) & ((1u << B) - 1u)), acc[e]);
          if constexpr (LOWER) {
            const unsigned wl = *reinterpret_cast<const unsigned*>(row + (sh.off_vl - sh.off_vc));
            const float pl = ps * (1.f / 16.f);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[e] = fmaf(pl, code_f((wl >> (e * 4)) & 15u), acc[e]);
            zsum = fmaf(-8.f, pl, zsum);
          }
          zsum = fmaf(p, z, zsum);
        }
      } else {
        const bf16* vrows = reinterpret_cast<const bf16*>(st) + wtile * D;
        for (int j = pv_ks; j < n; j += L::ksplit) {
          const float p = p_row[j];
          float vf[8];
          detail::bf16x8_to_f32(*reinterpret_cast<const uint4*>(vrows + j * D + pv_c * 8), vf);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[e] = fmaf(p, vf[e], acc[e]);
        }
      }
    }
    __syncthreads();
  }

  // Sum o over the key splits in a fixed order; write o / l, m and l.
  float* fin = reinterpret_cast<float*>(stage0);
#pragma unroll
  for (int e = 0; e < 8; ++e) fin[pv_r * D + pv_c * 8 + e] = acc[e] + zsum;
  __syncthreads();
  for (int idx = t; idx < GQ * D; idx += threads) {
    const int g = idx / D, d = idx % D;
    float o = 0.f;
#pragma unroll
    for (int k = 0; k < L::ksplit; ++k) o += fin[(k * GQ + g) * D + d];
    part_o[((bh0 + g) * a.splits + split) * D + d] = o / head_l[g];
  }
  if (t < GQ) {
    part_ml[((bh0 + t) * a.splits + split) * 2 + 0] = head_m[t];
    part_ml[((bh0 + t) * a.splits + split) * 2 + 1] = head_l[t];
  }
}

// Merges the splits by their running max and sum (Flash-Decoding).
template <int D>
__global__ void quant_decode_combine_kernel(quant_decode_args a) {
  detail::allow_dependent_launch();
  const int h = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
  const std::int64_t bh = std::int64_t(b) * a.n_heads + h;
  const auto [m, num, den] = detail::merge_splits<D>(
      a.partial + bh * a.splits * D,
      a.partial + std::int64_t(a.batch) * a.n_heads * a.splits * D + bh * a.splits * 2, a.splits, d);
  const std::int64_t at = std::int64_t(b) * a.ld_out + std::int64_t(h) * D + d;
  if (a.out_f32)
    a.out_f32[at] = num / den;
  else
    reinterpret_cast<bf16*>(a.out_bf16)[at] = __float2bfloat16(num / den);
}

using kernel_fn = void (*)(quant_decode_args, shape);

template <int D, int GQ>
kernel_fn pick_bits(int bits, bool lower) {
  if (lower) return quant_decode_kernel<D, GQ, 4, true>;
  switch (bits) {
    case 1: return quant_decode_kernel<D, GQ, 1, false>;
    case 2: return quant_decode_kernel<D, GQ, 2, false>;
    default: return quant_decode_kernel<D, GQ, 4, false>;
  }
}

template <int D>
kernel_fn pick_group(int gq, int bits, bool lower) {
  switch (gq) {
    case 1: return pick_bits<D, 1>(bits, lower);
    case 4: return pick_bits<D, 4>(bits, lower);
    case 8: return pick_bits<D, 8>(bits, lower);
    default: break;
  }
  throw std::invalid_argument("quant_decode_attention: GQA group " + std::to_string(gq) +
                              " is not one of 1, 4, 8");
}

std::size_t smem_of(int d, int gq, int stage_bytes) {
  if (d == 128) {
    if (gq == 1) return block_layout<128, 1>::smem(stage_bytes);
    if (gq == 4) return block_layout<128, 4>::smem(stage_bytes);
    return block_layout<128, 8>::smem(stage_bytes);
  }
  if (gq == 1) return block_layout<64, 1>::smem(stage_bytes);
  if (gq == 4) return block_layout<64, 4>::smem(stage_bytes);
  return block_layout<64, 8>::smem(stage_bytes);
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

void fail(const std::string& what) { throw std::invalid_argument("quant_decode_attention: " + what); }

// Checks the arguments; returns the kernel, its shape and shared memory.
kernel_fn prepare(const quant_decode_args& a, shape& sh, std::size_t& smem) {
  if (a.head_dim != 64 && a.head_dim != 128) fail("head_dim " + std::to_string(a.head_dim) + " is not 64 or 128");
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    fail("n_heads " + std::to_string(a.n_heads) + " is not a multiple of n_kv_heads " +
         std::to_string(a.n_kv_heads));
  if (a.bits != 1 && a.bits != 2 && a.bits != 4) fail("bits must be 1, 2 or 4, got " + std::to_string(a.bits));
  const bool lower = a.k_lower != nullptr;
  if (lower != (a.v_lower != nullptr)) fail("keys and values must both have a residual plane or neither");
  if (lower && a.bits != 4) fail("a residual plane needs 4-bit upper codes, got " + std::to_string(a.bits));
  if (a.group < 8 || a.group > ptile || (a.group & (a.group - 1)) != 0)
    fail("group " + std::to_string(a.group) + " is not a power of two in [8, 128]");
  if (a.value_group != std::min(a.group, a.head_dim))
    fail("value_group " + std::to_string(a.value_group) + " is not min(group, head_dim) = " +
         std::to_string(std::min(a.group, a.head_dim)) + " (memory/kv_layout.hpp)");
  if (a.n_quant < 0 || a.n_quant % a.group != 0)
    fail("n_quant " + std::to_string(a.n_quant) + " is not a non-negative multiple of the group " +
         std::to_string(a.group));
  if (a.win_len < 0 || a.n_quant + a.win_len < 1) fail("no stored positions to attend");
  if (a.splits < 1) fail("splits must be >= 1, got " + std::to_string(a.splits));
  if (!a.q || !a.partial || (!a.out_f32 && !a.out_bf16)) fail("q, partial or out missing");
  if (a.n_quant > 0) {
    const void* ptrs[] = {a.k_codes, a.k_scale, a.k_zero, a.v_codes, a.v_scale, a.v_zero};
    for (const void* p : ptrs)
      if (!p || !aligned16(p)) fail("packed codes, scales and zeros must be present and 16-byte aligned");
    if (lower && (!aligned16(a.k_lower) || !aligned16(a.v_lower))) fail("lower planes must be 16-byte aligned");
  }
  if (a.win_len > 0 && (!a.win_k || !a.win_v || !aligned16(a.win_k) || !aligned16(a.win_v)))
    fail("window rows must be present and 16-byte aligned");
  sh = make_shape(a, lower);
  if (sh.seq_k_codes % 16 || sh.seq_v_codes % 16 || sh.seq_k_scales % 8 || sh.seq_v_scales % 8 ||
      sh.seq_window % 8)
    fail("sequence distances must keep every sequence 16-byte aligned");
  const int gq = a.n_heads / a.n_kv_heads;
  kernel_fn k = a.head_dim == 128 ? pick_group<128>(gq, a.bits, lower) : pick_group<64>(gq, a.bits, lower);
  smem = smem_of(a.head_dim, gq, sh.stage_bytes);
  CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  return k;
}

}  // namespace

std::size_t quant_decode_attention_scratch_floats(int batch, int n_heads, int head_dim, int max_splits) {
  return std::size_t(batch) * std::size_t(n_heads) * std::size_t(max_splits) * std::size_t(head_dim + 2);
}

std::int64_t quant_decode_attention_tiles(std::int64_t n_quant, std::int64_t win_len) {
  return (n_quant + ptile - 1) / ptile + (win_len + wtile - 1) / wtile;
}

int quant_decode_attention_splits(int batch, int n_kv_heads, std::int64_t n_quant, std::int64_t win_len,
                                  int sm_count, int max_splits, int blocks_per_sm) {
  const std::int64_t tiles = std::max<std::int64_t>(1, quant_decode_attention_tiles(n_quant, win_len));
  const std::int64_t pairs = std::int64_t(batch) * n_kv_heads;
  const std::int64_t slots = std::int64_t(std::max(sm_count, 1)) * std::max(blocks_per_sm, 1);
  const int cap = int(std::max<std::int64_t>(1, std::min<std::int64_t>(max_splits, tiles / 2)));
  int best = 1;
  double best_score = -1;
  for (int s = 1; s <= cap; ++s) {
    const std::int64_t chunk = (tiles + s - 1) / s, active = (tiles + chunk - 1) / chunk;
    const std::int64_t waves = (pairs * active + slots - 1) / slots;
    const double score = double(pairs * tiles) / double(waves * slots * chunk);
    if (score > best_score + 1e-9) {
      best_score = score;
      best = s;
    }
  }
  return best;
}

int quant_decode_attention_blocks_per_sm(const quant_decode_args& a) {
  shape sh;
  std::size_t smem = 0;
  const kernel_fn k = prepare(a, sh, smem);
  int n = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, threads, smem));
  return std::max(n, 1);
}

void quant_decode_attention(const quant_decode_args& in, stream_t s) {
  if (in.batch <= 0) return;
  quant_decode_args a = in;
  if (a.ld_q == 0) a.ld_q = std::int64_t(a.n_heads) * a.head_dim;
  if (a.ld_out == 0) a.ld_out = std::int64_t(a.n_heads) * a.head_dim;
  shape sh;
  std::size_t smem = 0;
  const kernel_fn k = prepare(a, sh, smem);
  const dim3 grid(unsigned(a.splits), unsigned(a.n_kv_heads), unsigned(a.batch));
  k<<<grid, threads, smem, as_stream(s)>>>(a, sh);
  CUDA_CHECK_LAUNCH();
  const dim3 cgrid(unsigned(a.n_heads), unsigned(a.batch));
  if (a.head_dim == 128)
    quant_decode_combine_kernel<128><<<cgrid, 128, 0, as_stream(s)>>>(a);
  else
    quant_decode_combine_kernel<64><<<cgrid, 64, 0, as_stream(s)>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda
