// Packed decode attention, version 4: the cache in lane order
// (packed_lane_order.hpp), head_dim 128. See packed_attention.hpp for the
// interface (the same arguments and partial outputs as v3, whose combine
// merges the splits) and NOTES.md, "Packed attention v4".
//
// Block = (split, KV head, entry or multi-query block), 4 warps; a split is
// a run of 128-position tiles, and warp w takes tiles first + w, + 4, ...,
// each as four chunks of 32 positions. The warp's packed chunks come first:
// it alone copies them into its own ring of shared-memory stages (cp.async)
// and computes them; its window chunks follow, read straight from global
// memory. No block barrier until the split's end. Per chunk:
//   scores: S^T = K Q'^T per 16 positions, A = the key codes as they lie
//     (rows: positions g and g + 8, one 4b-byte load each per lane),
//     B = Q' (the block's query columns times the key group's channel
//     scales, in f16: recomputed when the group changes), plus
//     base = sum_c z_c q_c per column (an MMA of the zeros against q);
//   online softmax per column (log2 domain) over the chunk's 32 positions;
//     lane (g, t) holds columns 2t and 2t + 1, which are also its columns of
//     O^T, so the rescale needs no shuffle (and is skipped when no maximum
//     moved);
//   values: O^T += V^T P'^T, A = value codes as they lie (2b words per lane
//     per 16 positions), B = P' = f16(p s_t): the score accumulators packed
//     to f16 and transposed (movmatrix); the zero terms sum_t p z_t are one
//     more MMA per value group with the zeros as A.
// Window rows (bf16 ring) take the same MMAs with f16 conversions and unit
// scales, q and p each as two f16 halves (hi + lo: near f32, as v3 reads
// these rows). SpeCache's side work is compiled only into kernels built with
// SIDE (the others carry none of it): raw scores are stored per chunk; a
// replaced row only masks its position in the chunk loops (a ballot over a
// window of the sorted positions), and the block's replaced rows are
// computed after them, their loads batched, spread over the four warps and
// merged into each warp's online softmax (exact f32 scores and values).
//
// Codes enter the MMAs as f16 subnormals c 2^(p - 24) (one AND each,
// packed_lane_mma.cuh's sub_pair): Q' takes 2^-p per channel pair and the
// scores 2^24; P' of positions + 8 takes 2^-VT and O^T's packed part 2^(24 - p)
// per channel row before the window's rows join it.
//
// Error: Q' = f16(f16(f16(q scale log2 e) s) 2^-p) and P' = f16(f16(p) s),
// two roundings each (v3: one; the 2^-p ones are exact above f16's normals,
// 2^-25 absolute below); the test tolerance (5e-3) is v3's.
//
// The kernel itself, included by packed_attention_v4.cu alone (which holds
// the launch: shapes, shared-memory layout, dispatch over the template
// arguments).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/packed_attention.hpp"
#include "kernels/cuda/packed_lane_mma.cuh"
#include "kernels/cuda/packed_lane_order.hpp"
#include "kernels/cuda/packed_mma.cuh"
#include "kernels/cuda/packed_split.cuh"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda::v4::device {

constexpr int warps = 4;
constexpr int threads = 32 * warps;
constexpr int D = lane_order::head_dim;
constexpr int chunk_tokens = 32;
constexpr int tile_tokens = 128;  // the split rule's unit (packed_attention_tiles)
constexpr float log2e = 1.4426950408889634f;

using detail::cp_async_commit;
using detail::cp_async_wait_dyn;
using packed_mma::mma16816;
using namespace lane_mma;

// A stage's bytes (offsets from its start): the key codes [32][row bytes],
// their lower plane [32][64] (INT8 reads only), the value blocks, their lower
// plane, the value scales and zeros [32][groups] f16, then the key group's
// scales and zeros [128] f16. The template arguments fix them, so the kernel's
// offsets are immediates; the launch sizes shared memory with the same rule.
struct stage_layout {
  int kl, vc, vl, vs, vz, ks, kz, bytes;
};
__host__ __device__ constexpr stage_layout stage_layout_of(int bits, bool lower, int value_groups) {
  const int codes = chunk_tokens * lane_order::key_row_bytes(bits), plane = lower ? chunk_tokens * 64 : 0;
  const int scales = (chunk_tokens * value_groups * 2 + 15) / 16 * 16;
  stage_layout l{};
  l.kl = codes;
  l.vc = l.kl + plane;
  l.vl = l.vc + codes;
  l.vs = l.vl + plane;
  l.vz = l.vs + scales;
  l.ks = l.vz + scales;
  l.kz = l.ks + D * 2;
  l.bytes = l.kz + D * 2;
  return l;
}

// Copies BYTES (a multiple of 16) into shared memory, one 16-byte piece per
// lane and 512 bytes: dst and src already point at this lane's first piece.
template <int BYTES>
__device__ __forceinline__ void copy_lane_pieces(unsigned dst, const unsigned char* src, int lane) {
#pragma unroll
  for (int i = 0; i < BYTES; i += 32 * 16)
    if (BYTES - i >= 32 * 16 || lane * 16 < BYTES - i) detail::cp_async16_shared(dst + i, src + i);
}

struct launch_shape {
  int gq = 4;
  int log2_group = 6;
  int stages = 3;
  int warp_bytes = 0;  // the warp's stages (stage_layout_of(...).bytes each), or its rows at the end
  int off_warps = 0, smem = 0;  // q16 [8][128] f16 at 0, ml [warps][8][2] f32 after it
  // Replaced rows only: q in f32 [8][128] and per warp [32] positions, [32]
  // row indices and [32][8] exact scores (0: none); their value rows go
  // through the warp's stage region once its loops are done.
  int off_qf = 0, off_rep = 0;
};

// q16 rows padded by 8 halves: row g's words start at bank 4 g (conflict-free
// fragment loads: lanes (g, t) read word 68 g + 8 j + 4 h + t).
constexpr int q16_stride = D + 8;
// q - f16(q) as f16 (same layout): the window rows' scores take both halves,
// near f32 (v3 reads the window in f32).
constexpr int off_q16lo = 8 * q16_stride * 2;
constexpr int off_ml = 2 * 8 * q16_stride * 2;
constexpr int fixed_bytes = off_ml + warps * 8 * 2 * 4;
// Replaced rows, per warp: [32] positions, [32] row indices, [32][8] exact scores.
constexpr int rep_warp_words = 64 + 32 * 8;
// Replaced rows computed together (their loads in flight at once); their
// value rows in f32 fill 4 KiB of the warp's stage region (warp_bytes >= 8 D 4).
constexpr int rep_batch = 8;

// MINB: the resident blocks per SM the registers are budgeted for
// (packed_attention_args::v4_blocks): 3 gives 168 a thread, 4 gives 128.
template <int B, bool LOWER, int NG, bool SIDE, int MINB>
__global__ void __launch_bounds__(threads, MINB) packed_attention_v4_kernel(packed_attention_args a, launch_shape sh) {
  constexpr int ROWB = lane_order::key_row_bytes(B);  // bytes per token of a plane (keys; values in blocks)
  constexpr int VG = D / NG;                          // channels per value group
  constexpr int MT_PER_G = VG / 16;                   // m-tiles of 16 channels per value group
  constexpr stage_layout L = stage_layout_of(B, LOWER, NG);
  // The codes' bit offsets (sub_pair): keys by channel pair, values by
  // channel row plus VT for positions + 8.
  constexpr int BP = LOWER ? 4 : B;
  constexpr int VT = lane_order::value_token_shift(BP);
  static_assert(VT >= 0, "lane order: a value pair's shift must split into channel and position parts");
  extern __shared__ __align__(16) unsigned char smem[];
  detail::grid_dependency_wait();

  const int split = blockIdx.x, kh = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const packed_cache_view& c = a.cache;
  const int gq = sh.gq, nkv = c.n_kv_heads;
  const detail::packed_block blk = detail::packed_block_of<tile_tokens>(a, gq, split);
  if (blk.first >= blk.last) {
    detail::write_empty_split<D>(a, blk, gq, kh, split, tid);
    return;
  }
  const int e = blk.e, ncols = blk.ncols, slot = blk.slot, len = blk.len, nq = blk.nq, ptiles = blk.ptiles;
  const int first = blk.first, last = blk.last;

  // q * scale * log2 e as f16, one row per query column (zeros past ncols).
  __half* q16_s = reinterpret_cast<__half*>(smem);
  float* ml_s = reinterpret_cast<float*>(smem + off_ml);
  const float qscale = a.scale * log2e;
  for (int i = tid; i < 8 * D; i += threads) {
    const int h = i / D, qi = h / gq;
    float v = 0.f;
    if (h < ncols) {
      const std::uint16_t* qrow = a.q + std::int64_t(e + qi) * a.ld_q + (std::int64_t(kh) * gq + (h - qi * gq)) * D;
      v = bf16_bits_to_f32(qrow[i - h * D]) * qscale;
    }
    const __half hi = __float2half_rn(v);
    q16_s[h * q16_stride + (i - h * D)] = hi;
    reinterpret_cast<__half*>(smem + off_q16lo)[h * q16_stride + (i - h * D)] = __float2half_rn(v - __half2float(hi));
    if (SIDE && a.rows.positions) reinterpret_cast<float*>(smem + sh.off_qf)[i] = v;
  }
  __syncthreads();

  const detail::packed_run r = detail::packed_run_of<LOWER>(c, slot, kh);
  const unsigned char *kc_g = r.k_codes, *kl_g = r.k_lower, *vc_g = r.v_codes, *vl_g = r.v_lower;
  const std::uint16_t *ks_g = r.k_scale, *kz_g = r.k_zero, *vs_g = r.v_scale, *vz_g = r.v_zero;
  const std::uint16_t* wk_g = r.win_k;
  const std::uint16_t* wv_g = r.win_v;
  // This lane's two columns, 2t and 2t + 1 (the scores' accumulator layout),
  // and the positions each attends.
  const int len0 = 2 * t < ncols ? a.entry_len[e + 2 * t / gq] : 0;
  const int len1 = 2 * t + 1 < ncols ? a.entry_len[e + (2 * t + 1) / gq] : 0;
  const int min_len = a.entry_len[e];  // the shortest real column (ascending)

  // SpeCache's replaced rows: this (entry, KV head)'s sorted positions. The
  // chunk loops mask them (a warp window of 32 positions in registers); the
  // rows themselves are computed after the loops.
  const bool mixed = SIDE && a.rows.positions != nullptr;
  const std::int32_t* rep_pos = nullptr;
  int rep_count = 0;
  int rep_window = 0, rep_reg = 0x7fffffff;  // lane holds position rep_window + lane (or "none")
  std::int64_t rep_base = 0;
  if (mixed) {
    const std::int64_t ri = a.rows.entry_index ? a.rows.entry_index[e] : e;
    rep_base = (ri * nkv + kh) * a.rows.stride;
    rep_pos = a.rows.positions + rep_base;
    rep_count = a.rows.count[ri * nkv + kh];
    rep_reg = lane < rep_count ? rep_pos[lane] : 0x7fffffff;
  }
  // Raw scores (log2) of columns 2t and 2t + 1, when their entries have a scores row.
  float* my_scores[2] = {nullptr, nullptr};
  if (SIDE && a.scores) {
#pragma unroll
    for (int cc = 0; cc < 2; ++cc) {
      const int col = 2 * t + cc;
      if (col < ncols) {
        const int qi = col / gq, r = a.entry_scores_row[e + qi];
        if (r >= 0)
          my_scores[cc] =
              a.scores + (std::int64_t(r) * a.n_heads + std::int64_t(kh) * gq + (col - qi * gq)) * a.scores_stride;
      }
    }
  }
  const bool any_scores = SIDE && (my_scores[0] != nullptr || my_scores[1] != nullptr);

  unsigned char* region = smem + sh.off_warps + warp * sh.warp_bytes;
  const int S = sh.stages;
  // This lane's 16-byte piece of every copy: its source pointers and its
  // shared address in stage 0 (32 bits). The shared address stays in a
  // register; ptxas, short of registers, still rebuilds the source pointers
  // per chunk from the run's (NOTES.md, Stop 25).
  const unsigned region_lane = static_cast<unsigned>(__cvta_generic_to_shared(region)) + lane * 16;
  auto lane_bytes = [&](const void* p) { return static_cast<const unsigned char*>(p) + lane * 16; };
  const unsigned char *kc_l = lane_bytes(kc_g), *vc_l = lane_bytes(vc_g), *kl_l = nullptr, *vl_l = nullptr;
  if constexpr (LOWER) {
    kl_l = lane_bytes(kl_g);
    vl_l = lane_bytes(vl_g);
  }
  const unsigned char *vs_l = lane_bytes(vs_g), *vz_l = lane_bytes(vz_g);
  const unsigned char *ks_l = lane_bytes(ks_g), *kz_l = lane_bytes(kz_g);
  // The warp's tiles: first + warp + 4 i, each four chunks of 32 positions
  // (chunk k: tile i = k / 4, chunk k % 4). The packed tiles come first.
  const int my_tiles = max((last - first - warp + warps - 1) / warps, 0);
  const int my_ptiles = ptiles > first + warp ? min(my_tiles, (ptiles - first - warp + warps - 1) / warps) : 0;
  const int nk = 4 * my_tiles, nkp = 4 * my_ptiles;
  auto chunk_tile = [&](int k) { return first + warp + warps * (k >> 2); };
  int load_group = -1;
  int load_stage = 0;  // stage of chunk k: k % S, kept by counters (no division)
  auto load_chunk = [&](int k) {
    if (k >= nkp) return;
    const int p0 = chunk_tile(k) * tile_tokens + (k & 3) * chunk_tokens;
    if (p0 >= nq) return;
    const unsigned st = region_lane + load_stage * L.bytes;
    copy_lane_pieces<chunk_tokens * ROWB>(st, kc_l + std::int64_t(p0) * ROWB, lane);
    copy_lane_pieces<chunk_tokens * ROWB>(st + L.vc, vc_l + std::int64_t(p0) * ROWB, lane);
    if constexpr (LOWER) {
      copy_lane_pieces<chunk_tokens * 64>(st + L.kl, kl_l + std::int64_t(p0) * 64, lane);
      copy_lane_pieces<chunk_tokens * 64>(st + L.vl, vl_l + std::int64_t(p0) * 64, lane);
    }
    copy_lane_pieces<chunk_tokens * NG * 2>(st + L.vs, vs_l + std::int64_t(p0) * (NG * 2), lane);
    copy_lane_pieces<chunk_tokens * NG * 2>(st + L.vz, vz_l + std::int64_t(p0) * (NG * 2), lane);
    const int grp = p0 >> sh.log2_group;
    if (grp != load_group) {
      load_group = grp;
      copy_lane_pieces<D * 2>(st + L.ks, ks_l + std::int64_t(grp) * (D * 2), lane);
      copy_lane_pieces<D * 2>(st + L.kz, kz_l + std::int64_t(grp) * (D * 2), lane);
    }
  };
  for (int i = 0; i < S - 1; ++i) {
    load_chunk(i);
    cp_async_commit();
    load_stage = load_stage + 1 == S ? 0 : load_stage + 1;
  }
  int read_stage = 0;

  float o[8][4];       // O^T: m-tile j, (channel 16j + g | + 8) x (column 2t | 2t + 1)
  float zacc[NG][4];   // sum_t p z_t per value group, same columns
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) o[j][r] = 0.f;
#pragma unroll
  for (int cg = 0; cg < NG; ++cg)
#pragma unroll
    for (int r = 0; r < 4; ++r) zacc[cg][r] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};  // columns 2t, 2t + 1; l: this lane's share

  auto q16_word = [&](int j, int h) {
    return *reinterpret_cast<const unsigned*>(q16_s + g * q16_stride + 16 * j + 8 * h + 2 * t);
  };
  auto q16lo_word = [&](int j, int h) {
    return *reinterpret_cast<const unsigned*>(reinterpret_cast<const __half*>(smem + off_q16lo) + g * q16_stride +
                                              16 * j + 8 * h + 2 * t);
  };

  // Scores S^T = K Q'^T per m-tile of 16 positions: lane (g, t) holds
  // p[mt][r] = position 16 mt + g + 8 (r >> 1) of column 2t + (r & 1), in
  // the log2 domain. Replaced rows, masks and raw scores, then the online
  // softmax; leaves p as probabilities (times 2^-m) and rescales O.
  float ms[2] = {0.f, 0.f};  // the shift of this chunk's probabilities, per column
  // O^T's columns 2t and 2t + 1 are this lane's two columns, rescaled by
  // their corrections. Once the running maxima settle, most chunks leave
  // them (corr exactly 1): skip the 32 + 4 NG multiplies for the whole warp then.
  auto rescale = [&](const float (&corr)[2]) {
    if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        o[j][0] *= corr[0];
        o[j][1] *= corr[1];
        o[j][2] *= corr[0];
        o[j][3] *= corr[1];
      }
#pragma unroll
      for (int cg = 0; cg < NG; ++cg) {
        zacc[cg][0] *= corr[0];
        zacc[cg][1] *= corr[1];
        zacc[cg][2] *= corr[0];
        zacc[cg][3] *= corr[1];
      }
    }
  };
  auto softmax = [&](int p0, float (&p)[2][4]) {
    if (mixed) {
      // The chunk's replaced positions (bits of p - p0) from the warp's
      // window of 32 sorted positions (reloaded only when a chunk passes its
      // end); their codes' scores leave the softmax, and the rows come in
      // after the loops.
      unsigned bits = 0;
      for (;;) {
        const unsigned below = __ballot_sync(0xffffffffu, rep_reg < p0);
        if (below == 0xffffffffu) {
          rep_window += 32;
          rep_reg = rep_window + lane < rep_count ? rep_pos[rep_window + lane] : 0x7fffffff;
          continue;
        }
        const bool in = rep_reg >= p0 && rep_reg < p0 + chunk_tokens;
        bits |= __reduce_or_sync(0xffffffffu, in ? 1u << (rep_reg - p0) : 0u);
        if (!(__ballot_sync(0xffffffffu, rep_reg < p0 + chunk_tokens) >> 31)) break;
        rep_window += 32;  // the window ended inside the chunk: the next one may continue it
        rep_reg = rep_window + lane < rep_count ? rep_pos[rep_window + lane] : 0x7fffffff;
      }
      if (bits) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int r = 0; r < 4; ++r)
            if ((bits >> (16 * mt + g + 8 * (r >> 1))) & 1u) p[mt][r] = -INFINITY;
      }
    }
    // Masks only where some real column ends inside the chunk: columns past
    // ncols are never read, so their (finite) scores may stay.
    if (p0 + chunk_tokens > min_len || any_scores) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int pos = p0 + 16 * mt + g + 8 * (r >> 1), cl = (r & 1) ? len1 : len0;
          if (pos >= cl) p[mt][r] = -INFINITY;
          if (SIDE) {
            float* out = my_scores[r & 1];
            if (out && pos < cl) out[pos] = p[mt][r];
          }
        }
    }
    float corr[2];
#pragma unroll
    for (int cc = 0; cc < 2; ++cc) {
      float mx = fmaxf(fmaxf(p[0][cc], p[0][cc + 2]), fmaxf(p[1][cc], p[1][cc + 2]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      const float m_new = fmaxf(m_run[cc], mx);
      ms[cc] = m_new == -INFINITY ? 0.f : m_new;
      corr[cc] = exp2_ftz(m_run[cc] - ms[cc]);
      m_run[cc] = m_new;
      float psum = 0.f;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          p[mt][2 * h + cc] = exp2_ftz(p[mt][2 * h + cc] - ms[cc]);
          psum += p[mt][2 * h + cc];
        }
      l_run[cc] = l_run[cc] * corr[cc] + psum;
    }
    rescale(corr);
  };
  // The packed chunks, through the warp's stage ring.
  unsigned bq[8][2];  // B of the scores, column g: k-step j, channels 16j + 2t (+ 8), times the key group's scales
  float base[2] = {0.f, 0.f};  // sum_c q_c z_c of columns 2t, 2t + 1
  int cur_group = -1;
  for (int k = 0; k < nkp; ++k) {
    cp_async_wait_dyn(S - 2);
    __syncwarp();
    load_chunk(k + S - 1);
    cp_async_commit();
    load_stage = load_stage + 1 == S ? 0 : load_stage + 1;
    const unsigned char* st = region + read_stage * L.bytes;
    read_stage = read_stage + 1 == S ? 0 : read_stage + 1;
    const int p0 = chunk_tile(k) * tile_tokens + (k & 3) * chunk_tokens;
    if (p0 >= nq) continue;

    const int grp = p0 >> sh.log2_group;
    if (grp != cur_group) {
      cur_group = grp;
      const unsigned char* ks = st + L.ks;
      const unsigned char* kz = st + L.kz;
      float bacc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        unsigned qw[2], zw[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int off = 2 * (16 * j + 8 * h + 2 * t);
          qw[h] = q16_word(j, h);
          unsigned sw = *reinterpret_cast<const unsigned*>(ks + off);
          if constexpr (LOWER) sw = hmul2_raw(sw, h2_sixteenth);  // s / 16: exact
          bq[j][h] = hmul2_raw(qw[h], sw);
          zw[h] = *reinterpret_cast<const unsigned*>(kz + off);
        }
        // base = sum_c z_c q_c: A = the zeros broadcast over the 16 rows.
        mma16816(bacc, zw[0], zw[0], zw[1], zw[1], qw[0], qw[1]);
        if constexpr (LOWER) {  // k^ = (z - s/2) + (s/16) code: minus 8 sum_c q_c s_c / 16
          const unsigned m8 = h2(f16_sign | f16_pow2(3));  // (-8, -8)
          mma16816(bacc, m8, m8, m8, m8, bq[j][0], bq[j][1]);
        }
        // The codes come as c 2^(p - 24) (sub_pair): Q' takes the 2^-p of
        // its channels' pair, the scores the 2^24 (exact unless Q' falls
        // below f16's normals, 2^-14: then 2^-25 absolute at most).
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (lane_order::pair_shift(2 * j + h, BP) != 0)
            bq[j][h] = hmul2_raw(bq[j][h], h2(f16_pow2(-lane_order::pair_shift(2 * j + h, BP))));
      }
      base[0] = bacc[0];
      base[1] = bacc[1];
    }
    // A = the key codes of 16 positions (rows g and g + 8), as they lie.
    float p[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int r = 0; r < 4; ++r) p[mt][r] = 0.f;
      unsigned klo[B], khi[B];
      lds_words<B>(st + (16 * mt + g) * ROWB + t * 4 * B, klo);
      lds_words<B>(st + (16 * mt + 8 + g) * ROWB + t * 4 * B, khi);
      if constexpr (LOWER) {
        unsigned llo[4], lhi[4];
        lds_words<4>(st + L.kl + (16 * mt + g) * 64 + t * 16, llo);
        lds_words<4>(st + L.kl + (16 * mt + 8 + g) * 64 + t * 16, lhi);
#pragma unroll
        for (int j = 0; j < 8; ++j)
          mma16816(p[mt], sub_pair8(klo, llo, 2 * j), sub_pair8(khi, lhi, 2 * j), sub_pair8(klo, llo, 2 * j + 1),
                   sub_pair8(khi, lhi, 2 * j + 1), bq[j][0], bq[j][1]);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j)
          mma16816(p[mt], sub_pair<B>(klo, 2 * j), sub_pair<B>(khi, 2 * j), sub_pair<B>(klo, 2 * j + 1),
                   sub_pair<B>(khi, 2 * j + 1), bq[j][0], bq[j][1]);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) p[mt][r] = fmaf(p[mt][r], f32_pow2(24), base[r & 1]);
    }
    softmax(p0, p);

    // Values, 16 positions at a time: B = P^T, the score accumulators packed
    // and transposed.
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const unsigned pb0 = transpose8x8(pack_f16(p[mt][0], p[mt][1]));
      const unsigned pb1 = transpose8x8(pack_f16(p[mt][2], p[mt][3]));
      // The codes of positions + 8 (a2, a3) sit VT bits above those of a0,
      // a1 (value_token_shift): their P' takes the 2^-VT.
      const unsigned pb1v = VT != 0 ? hmul2_raw(pb1, h2(f16_pow2(-VT))) : pb1;
      const std::uint16_t* vs = reinterpret_cast<const std::uint16_t*>(st + L.vs);
      const std::uint16_t* vz = reinterpret_cast<const std::uint16_t*>(st + L.vz);
      const int t0 = mt * 16 + 2 * t, t1 = t0 + 8;  // positions of b0 (and + 1), of b1 (and + 1)
      unsigned pp0[NG], pp1[NG], sa[NG], sb[NG], za[NG], zb[NG];
      token_pairs<NG>(vs + t0 * NG, sa);
      token_pairs<NG>(vs + t1 * NG, sb);
      token_pairs<NG>(vz + t0 * NG, za);
      token_pairs<NG>(vz + t1 * NG, zb);
#pragma unroll
      for (int cg = 0; cg < NG; ++cg) {
        unsigned s0 = sa[cg], s1 = sb[cg];
        const unsigned z0 = za[cg], z1 = zb[cg];
        mma16816(zacc[cg], z0, z0, z1, z1, pb0, pb1);
        if constexpr (LOWER) {  // v^ = (z - s/2) + (s/16) code
          const unsigned h0 = hmul2_raw(s0, h2_minus_half), h1 = hmul2_raw(s1, h2_minus_half);
          mma16816(zacc[cg], h0, h0, h1, h1, pb0, pb1);
          s0 = hmul2_raw(s0, h2_sixteenth);
          s1 = hmul2_raw(s1, h2_sixteenth);
        }
        pp0[cg] = hmul2_raw(pb0, s0);
        pp1[cg] = hmul2_raw(pb1v, s1);
      }
      unsigned vw[2 * B];
      lds_words<2 * B>(st + L.vc + mt * lane_order::value_block_bytes(B) + lane * 8 * B, vw);
      if constexpr (LOWER) {
        unsigned lw[8];
        lds_words<8>(st + L.vl + mt * lane_order::value_block_bytes(4) + lane * 32, lw);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int cg = j / MT_PER_G;
          mma16816(o[j], sub_pair8(vw, lw, 4 * j), sub_pair8(vw, lw, 4 * j + 1), sub_pair8(vw, lw, 4 * j + 2),
                   sub_pair8(vw, lw, 4 * j + 3), pp0[cg], pp1[cg]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int cg = j / MT_PER_G;
          mma16816(o[j], sub_pair<B>(vw, 4 * j), sub_pair<B>(vw, 4 * j + 1), sub_pair<B>(vw, 4 * j + 2),
                   sub_pair<B>(vw, 4 * j + 3), pp0[cg], pp1[cg]);
        }
      }
    }
  }
  detail::cp_async_wait<0>();
  __syncwarp();
  // O^T's packed part to its true scale: channel row (16 j + g, + 8 for
  // r >= 2) gathered its codes as c 2^(p - 24), p its pair's shift at a0/a1.
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) o[j][r] *= f32_pow2(24 - lane_order::pair_shift(4 * j + (r >> 1), BP));

  // The window's chunks (bf16 ring, read straight from global memory): the
  // same MMAs with f16 conversions and unit scales, q and p each as two f16
  // halves (hi + lo: near f32, as v3 reads these rows).
  for (int k = nkp; k < nk; ++k) {
    const int p0 = nq + (chunk_tile(k) - ptiles) * tile_tokens + (k & 3) * chunk_tokens;
    if (p0 >= len) continue;
    float p[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int r = 0; r < 4; ++r) p[mt][r] = 0.f;
      const int plo = p0 + 16 * mt + g, phi = plo + 8;
      const bool vlo = plo < len, vhi = phi < len;
      const std::uint16_t* klo = wk_g + std::int64_t(plo % c.win_cap) * D;
      const std::uint16_t* khi = wk_g + std::int64_t(phi % c.win_cap) * D;
      auto word = [&](bool ok, const std::uint16_t* row, int ch) {
        return ok ? bf2_to_h2(*reinterpret_cast<const unsigned*>(row + ch)) : 0u;
      };
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int ch = 16 * j + 2 * t;
        const unsigned a0 = word(vlo, klo, ch), a1 = word(vhi, khi, ch), a2 = word(vlo, klo, ch + 8),
                       a3 = word(vhi, khi, ch + 8);
        mma16816(p[mt], a0, a1, a2, a3, q16_word(j, 0), q16_word(j, 1));
        mma16816(p[mt], a0, a1, a2, a3, q16lo_word(j, 0), q16lo_word(j, 1));
      }
    }
    softmax(p0, p);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      // A = V^T in f16, straight from the ring; B = P^T as hi + lo halves.
      auto lo_of = [](float x0, float x1, unsigned hi) {
        const __half2 h = *reinterpret_cast<const __half2*>(&hi);
        return pack_f16(x0 - __low2float(h), x1 - __high2float(h));
      };
      const unsigned h0 = pack_f16(p[mt][0], p[mt][1]), h1 = pack_f16(p[mt][2], p[mt][3]);
      const unsigned pb0 = transpose8x8(h0), pb1 = transpose8x8(h1);
      const unsigned pl0 = transpose8x8(lo_of(p[mt][0], p[mt][1], h0));
      const unsigned pl1 = transpose8x8(lo_of(p[mt][2], p[mt][3], h1));
      const int pa = p0 + mt * 16 + 2 * t;  // positions of a0 (and + 1); a2: + 8
      const std::uint16_t* rows[4];
      bool ok[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int pos = pa + (i & 1) + 8 * (i >> 1);
        ok[i] = pos < len;
        rows[i] = wv_g + std::int64_t(pos % c.win_cap) * D;
      }
      auto val = [&](int i, int ch) { return ok[i] ? bf16_bits_to_f32(rows[i][ch]) : 0.f; };
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int ch0 = 16 * j + g, ch1 = ch0 + 8;
        const unsigned a0 = pack_f16(val(0, ch0), val(1, ch0)), a1 = pack_f16(val(0, ch1), val(1, ch1)),
                       a2 = pack_f16(val(2, ch0), val(3, ch0)), a3 = pack_f16(val(2, ch1), val(3, ch1));
        mma16816(o[j], a0, a1, a2, a3, pb0, pb1);
        mma16816(o[j], a0, a1, a2, a3, pl0, pl1);
      }
    }
  }

  // SpeCache's replaced rows: the block's rows (positions in its tiles,
  // masked in the loops above) spread over the warps, rep_batch at a time
  // with all their loads in flight: exact f32 scores of every column (q in
  // f32) and values, merged into the warp's online softmax. After a block
  // barrier, so that a row's exact raw score lands after the loop's masked
  // one whichever warp stored that.
  if (mixed) {
    __syncthreads();
    const float* qf_s = reinterpret_cast<const float*>(smem + sh.off_qf);
    int* rep_s = reinterpret_cast<int*>(smem + sh.off_rep) + warp * rep_warp_words;  // [32] position, [32] row
    float* reps_s = reinterpret_cast<float*>(rep_s + 64);                           // [32][8] exact scores
    float* vrow_s = reinterpret_cast<float*>(region);                               // [rep_batch][128] values
    const int len_g = g < ncols ? a.entry_len[e + g / gq] : 0;  // lane (g, t) finishes column g's scores
    auto tile_of = [&](int p) { return p < nq ? p / tile_tokens : ptiles + (p - nq) / tile_tokens; };
    int seen = 0;  // the block's rows before this window of the list
    for (int w0 = 0; w0 < rep_count; w0 += 32) {
      const int p = w0 + lane < rep_count ? rep_pos[w0 + lane] : 0x7fffffff;
      const int tl = p < len ? tile_of(p) : -1;
      const bool ours = tl >= first && tl < last;
      const unsigned in_block = __ballot_sync(0xffffffffu, ours);
      const int rank = seen + __popc(in_block & ((1u << lane) - 1u));
      seen += __popc(in_block);
      const bool mine = ours && (rank & (warps - 1)) == warp;
      const unsigned my_rows = __ballot_sync(0xffffffffu, mine);
      if (mine) {
        const int at = __popc(my_rows & ((1u << lane) - 1u));
        rep_s[at] = p;
        rep_s[32 + at] = w0 + lane;
      }
      __syncwarp();
      const int nr = __popc(my_rows);
      for (int i0 = 0; i0 < nr; i0 += rep_batch) {
        const int nb = min(rep_batch, nr - i0);
        // Channels 4 lane .. 4 lane + 3 of every row's K and V, loaded together.
        uint2 kw[rep_batch], vw[rep_batch];
#pragma unroll
        for (int u = 0; u < rep_batch; ++u)
          if (u < nb) {
            const std::int64_t off = (rep_base + rep_s[32 + i0 + u]) * D + 4 * lane;
            kw[u] = *reinterpret_cast<const uint2*>(a.rows.k + off);
            vw[u] = *reinterpret_cast<const uint2*>(a.rows.v + off);
          }
        auto quad = [&](uint2 w, float (&x)[4]) {
          const unsigned u2[2] = {w.x, w.y};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const std::uint16_t raw = std::uint16_t(u2[i / 2] >> (16 * (i % 2)));
            x[i] = a.rows.f16 ? __half2float(__ushort_as_half(raw)) : bf16_bits_to_f32(raw);
          }
        };
#pragma unroll
        for (int u = 0; u < rep_batch; ++u)
          if (u < nb) {
            float kx[4], vx[4], part[8];
            quad(kw[u], kx);
            quad(vw[u], vx);
            *reinterpret_cast<float4*>(vrow_s + u * D + 4 * lane) = make_float4(vx[0], vx[1], vx[2], vx[3]);
#pragma unroll
            for (int col = 0; col < 8; ++col) {
              const float4 q4 = *reinterpret_cast<const float4*>(qf_s + col * D + 4 * lane);
              part[col] = q4.x * kx[0] + q4.y * kx[1] + q4.z * kx[2] + q4.w * kx[3];
            }
            // The 8 sums in one butterfly, column g in lane (g, t).
            const float dot = packed_mma::warp_sum_many<8>(part, lane);
            if (t == 0) reps_s[u * 8 + g] = rep_s[i0 + u] < len_g ? dot : -INFINITY;
          }
        __syncwarp();
        // The online softmax over the batch, per column (2t, 2t + 1).
        float corr[2];
#pragma unroll
        for (int cc = 0; cc < 2; ++cc) {
          float mx = -INFINITY;
          for (int u = 0; u < nb; ++u) mx = fmaxf(mx, reps_s[u * 8 + 2 * t + cc]);
          const float m_new = fmaxf(m_run[cc], mx);
          ms[cc] = m_new == -INFINITY ? 0.f : m_new;
          corr[cc] = exp2_ftz(m_run[cc] - ms[cc]);
          m_run[cc] = m_new;
          l_run[cc] *= corr[cc];
        }
        rescale(corr);
        for (int u = 0; u < nb; ++u) {
          const float s0 = reps_s[u * 8 + 2 * t], s1 = reps_s[u * 8 + 2 * t + 1];
          const float pr0 = exp2_ftz(s0 - ms[0]), pr1 = exp2_ftz(s1 - ms[1]);
          if (g == 0) {  // one lane per column: its raw scores and its share of the sum
            const int pos = rep_s[i0 + u];
            l_run[0] += pr0;
            l_run[1] += pr1;
            if (my_scores[0] && pos < len0) my_scores[0][pos] = s0;
            if (my_scores[1] && pos < len1) my_scores[1][pos] = s1;
          }
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const float va = vrow_s[u * D + 16 * j + g], vb = vrow_s[u * D + 16 * j + g + 8];
            o[j][0] = fmaf(pr0, va, o[j][0]);
            o[j][1] = fmaf(pr1, va, o[j][1]);
            o[j][2] = fmaf(pr0, vb, o[j][2]);
            o[j][3] = fmaf(pr1, vb, o[j][3]);
          }
        }
        __syncwarp();  // rep_s's scores and vrow_s are the next batch's
      }
      __syncwarp();  // rep_s's rows are the next window's
    }
  }

  // The warp's rows into its own (now idle) stage region, then the block's merge.
  float lsum[2];
#pragma unroll
  for (int cc = 0; cc < 2; ++cc) {
    float l = l_run[cc] + __shfl_xor_sync(0xffffffffu, l_run[cc], 4);
    l += __shfl_xor_sync(0xffffffffu, l, 8);
    lsum[cc] = l + __shfl_xor_sync(0xffffffffu, l, 16);
  }
  float* fin = reinterpret_cast<float*>(region);  // [8 columns][128]
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int ch = 16 * j + g + 8 * (r >> 1), col = 2 * t + (r & 1);
      fin[col * D + ch] = o[j][r] + zacc[j / MT_PER_G][r];
    }
  if (g == 0) {
#pragma unroll
    for (int cc = 0; cc < 2; ++cc) {
      ml_s[(warp * 8 + 2 * t + cc) * 2 + 0] = m_run[cc];
      ml_s[(warp * 8 + 2 * t + cc) * 2 + 1] = lsum[cc];
    }
  }
  __syncthreads();
  detail::write_split_partials<D, warps>(
      a, blk, gq, kh, split, ml_s, 8,
      [&](int w, int h) { return reinterpret_cast<const float*>(smem + sh.off_warps + w * sh.warp_bytes) + h * D; },
      tid, threads);
}

}  // namespace specpipe::kernels::cuda::v4::device
