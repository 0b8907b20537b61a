// Decode attention over the device's packed KV cache on the tensor cores
// (see packed_attention.hpp, packed_fragments.hpp and NOTES.md, "packed
// decode attention, v2").
//
// Block = (split, KV head, entry), 4 warps. A split is a run of tiles of 128
// positions (packed tokens, or window rows). Packed tiles come into shared
// memory with 16-byte cp.async, `stages` deep; per tile the block first turns
// the tile's key scales into the B operands of the score MMAs
// (w[h][c] = f16(q_h,c s_c), with q pre-scaled by scale * log2 e) and the
// zero terms base[h] = sum_c q_h,c z_c, then each warp takes 32 tokens:
//   scores: D/8 MMAs m16n8k16 (codes x w), + base; window rows: f32 dots;
//   online softmax per warp (log2 domain, FlashAttention-2 recurrences);
//   values: 4 k-steps of 8 tokens x D/32 channel blocks of MMAs (codes x
//   P' = f16(p s_t)), + sum_t p z_t in f32 per value group.
// The four warps' (m, l, o) are merged in shared memory at the end of the
// split, and a combine kernel merges the splits (Flash-Decoding;
// packed_combine.cu).
// INT8 read of the hierarchical cache: code = 16 U + L in [0, 255] (exact in
// f16), k^ = (z - s/2) + (s/16) code (QuantSpec sec. 4.1).
//
// The kernel itself (version 3, the cache in the CPU's byte order),
// included by packed_attention.cu alone, which holds the launch and the
// public entry points.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/packed_attention.hpp"
#include "kernels/cuda/packed_fragments.hpp"
#include "kernels/cuda/packed_mma.cuh"
#include "kernels/cuda/packed_split.cuh"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda::v3::device {

using detail::bf16;

constexpr int warps = 4;
constexpr int threads = 32 * warps;
constexpr int tile_tokens = 128;  // positions per tile: 32 per warp
constexpr float log2e = 1.4426950408889634f;
// Row stride of the per-warp probability rows: heads g & 3 read token t at
// banks 4 h + t, conflict-free.
constexpr int ps_stride = 36;

// The INT8 read with 4 query columns takes the slimmer shared-memory layout
// (see SLIM in the kernel).
__host__ __device__ constexpr bool slim_layout(bool lower, int nt) { return lower && nt == 1; }

// Byte offsets of the shared-memory carve-up and run-time shape values.
struct launch_shape {
  int gq = 4;             // query heads per KV head
  int log2_group = 6;     // log2 G
  int log2_vgroup32 = 1;  // log2 (value group / 32)
  int ngroups = 2;        // value groups per row
  int gcap = 4;           // value groups the per-warp arrays hold (v2: D / 32; lean: ngroups)
  int stages = 3;
  int stage_bytes = 0;
  int off_kl = 0, off_ks = 0, off_kz = 0, off_vc = 0, off_vl = 0, off_vs = 0, off_vz = 0;  // within a stage
  int off_q = 0, off_w = 0, off_base = 0, off_p = 0, off_alpha = 0, off_rep = 0, off_reps = 0, off_pp = 0,
      off_zz = 0, off_zsum = 0, off_ml = 0, smem = 0;
};

using detail::cp_async16;
using detail::cp_async_commit;
using detail::cp_async_n;
using detail::cp_async_wait;
using detail::cp_async_wait_dyn;
using detail::h2f;
using namespace packed_mma;

template <int D, int B, bool LOWER, int NT>
__global__ void __launch_bounds__(threads, 4) packed_attention_kernel(packed_attention_args a, launch_shape sh) {
  constexpr int HEADS = 4 * NT;   // query-head columns of the block (gq of them real)
  constexpr int KM = D / 8;       // score MMAs per slice
  constexpr int CB = D / 32;      // value channel blocks
  constexpr int ROW = D * B / 8;  // bytes of one token in one code plane (keys and values)
  constexpr int KCH = 16 * B;     // bytes of one channel's 128 tile tokens in the transposed key stage
  constexpr int CHUNKS = D / 64;  // 32-item warp chunks of the w preparation per group
  constexpr int LOG2B = B == 1 ? 0 : B == 2 ? 1 : 2;
  constexpr int LOG2D = D == 64 ? 6 : 7;
  constexpr int LOG2H = NT == 1 ? 2 : 3;
  extern __shared__ __align__(16) unsigned char smem[];
  // As a dependent launch: q, the window rows and the codes come from the
  // kernels before this one, and the partials are what the previous combine
  // read.
  detail::grid_dependency_wait();

  const int split = blockIdx.x, kh = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const packed_cache_view& c = a.cache;
  const int gq = sh.gq, nkv = c.n_kv_heads;
  const int G = 1 << sh.log2_group;
  const int S = sh.stages;

  // The block's query rows: entry e alone, or entries e .. e + nqry - 1 of
  // one sequence (packed_attention_args::block_first). Column h of the
  // block is query head h % gq of entry e + h / gq; ncols of them are real.
  const detail::packed_block blk = detail::packed_block_of<tile_tokens>(a, gq, split);
  const int e = blk.e, ncols = blk.ncols;
  __shared__ int clen_s[HEADS];  // positions each column attends (0: not a real column)
  if (tid < HEADS) clen_s[tid] = tid < ncols ? a.entry_len[e + tid / gq] : 0;
  if (blk.first >= blk.last) {
    detail::write_empty_split<D>(a, blk, gq, kh, split, tid);
    return;
  }
  const int slot = blk.slot, len = blk.len, nq = blk.nq, ptiles = blk.ptiles, first = blk.first, last = blk.last;

  const detail::packed_run r = detail::packed_run_of<LOWER>(c, slot, kh);
  const unsigned char *kc_g = r.k_codes, *kl_g = r.k_lower, *vc_g = r.v_codes, *vl_g = r.v_lower;
  const std::uint16_t *ks_g = r.k_scale, *kz_g = r.k_zero, *vs_g = r.v_scale, *vz_g = r.v_zero;
  const bf16* wk_g = reinterpret_cast<const bf16*>(r.win_k);
  const bf16* wv_g = reinterpret_cast<const bf16*>(r.win_v);
  const int ngroups = sh.ngroups;

  auto copy16 = [&](unsigned char* dst, const void* src, int bytes) {
    const unsigned char* s8 = static_cast<const unsigned char*>(src);
    for (int i = tid * 16; i < bytes; i += threads * 16) cp_async16(dst + i, s8 + i);
  };
  // Key blocks are transposed on the way in: channel c's codes of the tile's
  // groups become one stream of KCH bytes at c * KCH, so that the score loop
  // addresses every channel at a compile-time offset whatever G is. Copies of
  // min(16, G b / 8) bytes (the bytes of one channel of one group, or 16).
  // Every size is a power of two: shifts and masks, not integer divisions
  // (v2 divided by run-time values here, ~20 instructions per copy).
  auto copy_keys = [&](unsigned char* dst, const unsigned char* src, int ng) {
    const int lchan = sh.log2_group + LOG2B - 3;  // log2 of one channel's bytes in one group
    const int lunit = min(4, lchan);
    const int lblock = LOG2D + lchan;             // log2 of one group's key block
    const int units = ng << (lblock - lunit);
    for (int u = tid; u < units; u += threads) {
      const int byte = u << lunit;                // within the tile's blocks
      const int gi = byte >> lblock;              // group of the tile
      const int rem = byte & ((1 << lblock) - 1);
      const int ch = rem >> lchan, k = rem & ((1 << lchan) - 1);
      cp_async_n(dst + ch * KCH + (gi << lchan) + k, src + byte, 1 << lunit);
    }
  };
  // Packed tile: its whole groups (the last may run past the attended
  // positions: the codes exist up to the slot's packed length).
  auto load_tile = [&](int tile, int buf) {
    if (tile >= ptiles) return;  // window rows are read straight from global memory
    unsigned char* st = smem + buf * sh.stage_bytes;
    const int p0 = tile * tile_tokens;
    const int ng = (min(tile_tokens, nq - p0) + G - 1) >> sh.log2_group;
    const int ntok = ng << sh.log2_group;
    const std::int64_t g0 = p0 >> sh.log2_group;
    copy_keys(st, kc_g + std::int64_t(p0) * ROW, ng);
    if constexpr (LOWER) copy_keys(st + sh.off_kl, kl_g + std::int64_t(p0) * ROW, ng);
    copy16(st + sh.off_ks, ks_g + g0 * D, ng * D * 2);
    copy16(st + sh.off_kz, kz_g + g0 * D, ng * D * 2);
    copy16(st + sh.off_vc, vc_g + std::int64_t(p0) * ROW, ntok * ROW);
    if constexpr (LOWER) copy16(st + sh.off_vl, vl_g + std::int64_t(p0) * ROW, ntok * ROW);
    copy16(st + sh.off_vs, vs_g + std::int64_t(p0) * ngroups, ntok * ngroups * 2);
    copy16(st + sh.off_vz, vz_g + std::int64_t(p0) * ngroups, ntok * ngroups * 2);
  };

  for (int i = 0; i < S - 1; ++i) {
    if (first + i < last) load_tile(first + i, i);
    cp_async_commit();
  }

  // SLIM (the INT8 read with 4 query columns): q kept as given in bf16 (the
  // scale * log2 e applied where it is read, the same f32 product) and the
  // zero terms summed per slice into one running sum per warp instead of one
  // column per lane: 3 KiB less, which fits a third block per SM (81 -> 77.5
  // KiB). Elsewhere the per-slice butterfly cost more than it saved (the
  // 8-column verify of llama2-7b: 7.40 -> 9.04 ms at 8k), so v3 stays.
  constexpr bool SLIM = slim_layout(LOWER, NT);
  const float qscale = a.scale * log2e;
  float* q_s = reinterpret_cast<float*>(smem + sh.off_q);        // [HEADS][D], !SLIM
  bf16* q16_s = reinterpret_cast<bf16*>(smem + sh.off_q);        // [HEADS][D], SLIM
  // q_h,c * scale * log2 e in f32.
  auto qval = [&](int i) { return SLIM ? __bfloat162float(q16_s[i]) * qscale : q_s[i]; };
  // B operands of the scores as f16 pairs (channel 8 m + t low, + 4 high):
  // each lane places them into its slot's halves at the MMA (two byte
  // permutes, as the values' P'), so the zero halves are never stored.
  unsigned* w_s = reinterpret_cast<unsigned*>(smem + sh.off_w);  // [group][KM][HEADS][4]
  float* base_s = reinterpret_cast<float*>(smem + sh.off_base);  // [group][CHUNKS][HEADS]
  float* p_s = reinterpret_cast<float*>(smem + sh.off_p) + warp * HEADS * ps_stride;  // [HEADS][32 (+pad)]
  float* alpha_s = reinterpret_cast<float*>(smem + sh.off_alpha) + warp * HEADS;
  int* rep_s = reinterpret_cast<int*>(smem + sh.off_rep) + warp * 64;                // [32] offset, [32] row
  float* reps_s = reinterpret_cast<float*>(smem + sh.off_reps) + warp * 32 * HEADS;  // [32][HEADS] exact scores
  // P' = f16(p s_t) of the slice in B-operand order: pair (token 8 ks + t,
  // token 8 ks + t + 4) at [vg][ks][h][t].
  const int gcap = sh.gcap;  // value groups the per-warp arrays hold
  std::uint16_t* pp_s = reinterpret_cast<std::uint16_t*>(smem + sh.off_pp) + warp * gcap * 4 * HEADS * 4 * 2;
  // sum_t p z_t per (head, value group), one column per lane (token of the slice).
  float* zz_s = reinterpret_cast<float*>(smem + sh.off_zz) + warp * HEADS * gcap * 32;
  float* zsum_s = reinterpret_cast<float*>(smem + sh.off_zsum) + warp * HEADS * gcap;
  float* ml_s = reinterpret_cast<float*>(smem + sh.off_ml);  // [warps][HEADS][2]

  {
    for (int i = tid; i < HEADS * D; i += threads) {
      const int h = i / D, qi = h / gq;
      const bf16* qrow = reinterpret_cast<const bf16*>(a.q) + std::int64_t(e + qi) * a.ld_q +
                         (std::int64_t(kh) * gq + (h - qi * gq)) * D;
      if constexpr (SLIM)
        q16_s[i] = h < ncols ? qrow[i - h * D] : __float2bfloat16(0.f);
      else
        q_s[i] = h < ncols ? __bfloat162float(qrow[i - h * D]) * qscale : 0.f;
    }
    if constexpr (SLIM)
      for (int i = lane; i < HEADS * gcap; i += 32) zsum_s[i] = 0.f;
    else
      for (int i = lane; i < HEADS * gcap * 32; i += 32) zz_s[i] = 0.f;
  }

  float o[NT][CB][4];
  float m_run[NT][2], l_run[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int cb = 0; cb < CB; ++cb)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[nt][cb][i] = 0.f;
    m_run[nt][0] = m_run[nt][1] = -INFINITY;
    l_run[nt][0] = l_run[nt][1] = 0.f;
  }

  // Replaced rows of this (entry, KV head): a cursor into the sorted list.
  const bool mixed = a.rows.positions != nullptr;
  const std::int32_t* rep_pos = nullptr;
  int rep_count = 0, rc = 0;
  std::int64_t rep_base = 0;
  if (mixed) {
    const std::int64_t ri = a.rows.entry_index ? a.rows.entry_index[e] : e;
    rep_base = (ri * nkv + kh) * a.rows.stride;
    rep_pos = a.rows.positions + rep_base;
    rep_count = a.rows.count[ri * nkv + kh];
  }
  // Raw scores: each column's row offset (-1: not written). In a
  // multi-query block, column h belongs to entry e + h / gq.
  __shared__ long long scol_s[HEADS];
  const bool any_scores = a.scores != nullptr;
  if (any_scores && tid < HEADS) {
    long long off = -1;
    if (tid < ncols) {
      const int qi = tid / gq;
      const int r = a.entry_scores_row[e + qi];
      if (r >= 0) off = (std::int64_t(r) * a.n_heads + std::int64_t(kh) * gq + (tid - qi * gq)) * a.scores_stride;
    }
    scol_s[tid] = off;
  }

  const int j_lane = frag::slot_of_lane(t);  // QK/PV output slot of this lane
  const int bj = frag::b_slot(g);            // B operand slot of this lane
  const int bh = frag::b_head(g);            // B operand head (in an n-tile) of this lane
  const unsigned sel_lo = frag::place_lo_selector(bj), sel_hi = frag::place_hi_selector(bj);

  int buf_read = 0, buf_write = S - 1;  // it % S and (it + S - 1) % S without a run-time modulo
  for (int it = 0; it < last - first; ++it) {
    const int tile = first + it;
    cp_async_wait_dyn(S - 2);
    __syncthreads();  // tile `it` visible; every warp is done with tile it-1 and its stage
    if (tile + S - 1 < last) load_tile(tile + S - 1, buf_write);
    cp_async_commit();
    const bool packed = tile < ptiles;
    const unsigned char* st = smem + buf_read * sh.stage_bytes;
    buf_read = buf_read + 1 == S ? 0 : buf_read + 1;
    buf_write = buf_write + 1 == S ? 0 : buf_write + 1;
    const int p0 = packed ? tile * tile_tokens : nq + (tile - ptiles) * tile_tokens;
    const int nvalid = min(tile_tokens, (packed ? nq : len) - p0);

    if (packed) {  // B operands of the scores and the zero terms of the tile's groups
      const int ng = (nvalid + G - 1) >> sh.log2_group;
      const int items = ng * (D / 2);
      for (int i = tid; i < items; i += threads) {  // whole warps: items is a multiple of 32
        const int gl = i / (D / 2), r = i - gl * (D / 2);
        const int m = r >> 2, tt = r & 3;
        const int c1 = 8 * m + tt, c2 = c1 + 4;
        const std::uint16_t* ks = reinterpret_cast<const std::uint16_t*>(st + sh.off_ks) + gl * D;
        const std::uint16_t* kz = reinterpret_cast<const std::uint16_t*>(st + sh.off_kz) + gl * D;
        float s1 = h2f(ks[c1]), s2 = h2f(ks[c2]), z1 = h2f(kz[c1]), z2 = h2f(kz[c2]);
        if constexpr (LOWER) {  // k^ = (z - s/2) + (s/16)(16 U + L)
          z1 -= 0.5f * s1;
          z2 -= 0.5f * s2;
          s1 *= 0.0625f;
          s2 *= 0.0625f;
        }
        // [group][m][h][t] = (w of channel c1, w of channel c2) as f16 halves.
        unsigned* wf = w_s + ((gl * KM + m) * HEADS) * 4 + tt;
        float part[HEADS];
#pragma unroll
        for (int h = 0; h < HEADS; ++h) {
          const float q1 = qval(h * D + c1), q2 = qval(h * D + c2);
          wf[h * 4] = unsigned(f16_bits(q1 * s1)) | (unsigned(f16_bits(q2 * s2)) << 16);
          part[h] = q1 * z1 + q2 * z2;
        }
        // The zero terms of all heads in one butterfly (v2: one warp_sum per head).
        const float sum = warp_sum_many<HEADS>(part, lane);
        if ((lane & (32 / HEADS - 1)) == 0) base_s[(gl * CHUNKS + (r >> 5)) * HEADS + (lane >> (5 - LOG2H))] = sum;
      }
    }
    __syncthreads();  // w_s and base_s ready

    const int ws = 32 * warp;
    if (ws < nvalid) {
      const int sv = min(32, nvalid - ws);  // valid tokens of this warp's slice
      const int ps = p0 + ws;               // position of slice token 0
      float s[NT][4], s_odd[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[nt][i] = s_odd[nt][i] = 0.f;

      if (packed) {
        const int gl = ws >> sh.log2_group;
        const unsigned char* kb = st + warp * 4 * B + 4 * frag::qword(B, g) + t * KCH;
        const unsigned* wf = w_s + (gl * KM * HEADS + bh) * 4 + t;
        // Even and odd MMAs accumulate into separate registers: two dependent
        // chains of KM / 2 tensor-core ops instead of one of KM (v2), whose
        // latency the few warps per scheduler could not hide.
#pragma unroll 2
        for (int m = 0; m < KM; m += 2) {
#pragma unroll
          for (int mm = 0; mm < 2; ++mm) {
            const unsigned char* k1 = kb + 8 * (m + mm) * KCH;  // channel 8 m + t
            const unsigned char* k2 = k1 + 4 * KCH;             // channel 8 m + t + 4
            unsigned a0, a1, a2, a3;
            if constexpr (LOWER)
              a_regs<B, true>(lds32(k1), lds32(k2), lds32(k1 + sh.off_kl), lds32(k2 + sh.off_kl), g, a0, a1, a2, a3);
            else
              a_regs<B, false>(lds32(k1), lds32(k2), 0u, 0u, g, a0, a1, a2, a3);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
              const unsigned pair = wf[((m + mm) * HEADS + nt * 4) * 4];
              const unsigned b0 = frag::byte_perm(pair, 0u, sel_lo), b1 = frag::byte_perm(pair, 0u, sel_hi);
              if (mm)
                mma16816(s_odd[nt], a0, a1, a2, a3, b0, b1);
              else
                mma16816(s[nt], a0, a1, a2, a3, b0, b1);
            }
          }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int h = nt * 4 + frag::head_in_tile(t, i);
            s[nt][i] += s_odd[nt][i];
            float b = 0.f;
#pragma unroll
            for (int ch = 0; ch < CHUNKS; ++ch) b += base_s[(gl * CHUNKS + ch) * HEADS + h];
            s[nt][i] += b;
          }
      } else {  // window rows: f32 dot products straight from the bf16 ring
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
          const int tau = frag::run_index(B, g, hi, j_lane);
          if (tau >= sv) continue;
          const bf16* krow = wk_g + std::int64_t((ps + tau) % c.win_cap) * D;
          float acc[NT][2];
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = 0.f;
#pragma unroll 4
          for (int cc = 0; cc < D / 8; ++cc) {
            float kf[8];
            detail::bf16x8_to_f32(*reinterpret_cast<const uint4*>(krow + cc * 8), kf);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
              for (int e2 = 0; e2 < 2; ++e2) {
                const int qi = (nt * 4 + 2 * (t & 1) + e2) * D + cc * 8;
                float4 qa, qb;
                if constexpr (SLIM) {
                  float qf[8];
                  detail::bf16x8_to_f32(*reinterpret_cast<const uint4*>(q16_s + qi), qf);
                  qa = make_float4(qf[0] * qscale, qf[1] * qscale, qf[2] * qscale, qf[3] * qscale);
                  qb = make_float4(qf[4] * qscale, qf[5] * qscale, qf[6] * qscale, qf[7] * qscale);
                } else {
                  qa = *reinterpret_cast<const float4*>(q_s + qi);
                  qb = *reinterpret_cast<const float4*>(q_s + qi + 4);
                }
                acc[nt][e2] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] + qb.x * kf[4] +
                               qb.y * kf[5] + qb.z * kf[6] + qb.w * kf[7];
              }
          }
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            s[nt][2 * hi] = acc[nt][0];
            s[nt][2 * hi + 1] = acc[nt][1];
          }
        }
      }
      // Masks: positions past the slice's valid ones, columns that are no
      // query, and positions past a column's own length (multi-query rows).
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int tau = frag::run_index(B, g, i >> 1, j_lane);
          if (tau >= sv || ps + tau >= clen_s[nt * 4 + frag::head_in_tile(t, i)]) s[nt][i] = -INFINITY;
        }

      // Replaced positions of this slice: exact scores from their rows.
      int nrep = 0;
      if (mixed) {
        for (;;) {  // skip positions before the slice (other warps' slices)
          const int idx = rc + lane;
          const int pos = idx < rep_count ? rep_pos[idx] : 0x7fffffff;
          const unsigned below = __ballot_sync(0xffffffffu, pos < ps);
          rc += __popc(below);
          if (below != 0xffffffffu) break;
        }
        const int idx = rc + lane;
        const int pos = idx < rep_count ? rep_pos[idx] : 0x7fffffff;
        const unsigned in = __ballot_sync(0xffffffffu, pos < ps + sv);
        nrep = __popc(in);
        if (lane < nrep) {
          rep_s[lane] = pos - ps;
          rep_s[32 + lane] = idx;
        }
        __syncwarp();
        for (int i = 0; i < nrep; ++i) {
          const int tau = rep_s[i];
          const std::uint16_t* kr = a.rows.k + (rep_base + rep_s[32 + i]) * D;
          float part[HEADS];
#pragma unroll
          for (int h = 0; h < HEADS; ++h) part[h] = 0.f;
#pragma unroll
          for (int k = 0; k < D / 32; ++k) {
            const int ch = lane * (D / 32) + k;
            const float kv = a.rows.f16 ? h2f(kr[ch]) : __bfloat162float(__ushort_as_bfloat16(kr[ch]));
#pragma unroll
            for (int h = 0; h < HEADS; ++h) part[h] += qval(h * D + ch) * kv;
          }
#pragma unroll
          for (int h = 0; h < HEADS; ++h) {
            part[h] = detail::warp_sum(part[h]);
            if (lane == 0) reps_s[i * HEADS + h] = part[h];
          }
          __syncwarp();
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              const int h = nt * 4 + frag::head_in_tile(t, k);
              if (frag::run_index(B, g, k >> 1, j_lane) == tau && h < ncols && ps + tau < clen_s[h])
                s[nt][k] = reps_s[i * HEADS + h];
            }
        }
      }

      if (any_scores) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int h = nt * 4 + frag::head_in_tile(t, i);
            const int tau = frag::run_index(B, g, i >> 1, j_lane);
            if (tau < sv && h < ncols && ps + tau < clen_s[h]) {
              const long long off = scol_s[h];
              if (off >= 0) a.scores[off + ps + tau] = s[nt][i];
            }
          }
      }

      // Online softmax per head over the warp's slice.
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
          float mx = fmaxf(s[nt][e2], s[nt][e2 + 2]);
#pragma unroll
          for (int off = 2; off < 32; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
          const float m_new = fmaxf(m_run[nt][e2], mx);
          float alpha = 1.f, pa = 0.f, pb = 0.f;
          if (m_new != -INFINITY) {
            alpha = exp2f(m_run[nt][e2] - m_new);  // 0 when nothing was seen before
            pa = exp2f(s[nt][e2] - m_new);
            pb = exp2f(s[nt][e2 + 2] - m_new);
          }
          m_run[nt][e2] = m_new;
          l_run[nt][e2] = l_run[nt][e2] * alpha + pa + pb;
#pragma unroll
          for (int cb = 0; cb < CB; ++cb) {
            o[nt][cb][e2] *= alpha;
            o[nt][cb][e2 + 2] *= alpha;
          }
          const int h = nt * 4 + 2 * (t & 1) + e2;
          p_s[h * ps_stride + frag::run_index(B, g, 0, j_lane)] = pa;
          p_s[h * ps_stride + frag::run_index(B, g, 1, j_lane)] = pb;
          if (g == 0) alpha_s[h] = alpha;
        }
      __syncwarp();
      if (mixed && lane < nrep) {  // replaced rows add their exact values below, not their codes
#pragma unroll
        for (int h = 0; h < HEADS; ++h) p_s[h * ps_stride + rep_s[lane]] = 0.f;
      }
      __syncwarp();

      // Lane = token of the slice: P' in B-operand order, and the zero terms.
      {
        float ph[HEADS], al[HEADS];
#pragma unroll
        for (int h = 0; h < HEADS; ++h) {
          ph[h] = p_s[h * ps_stride + lane];
          al[h] = alpha_s[h];
        }
        const std::uint16_t* vsc = reinterpret_cast<const std::uint16_t*>(st + sh.off_vs) + (ws + lane) * ngroups;
        const std::uint16_t* vze = reinterpret_cast<const std::uint16_t*>(st + sh.off_vz) + (ws + lane) * ngroups;
        // token tau = 8 ks + t' + 4 half -> pair slot ((vg * 4 + ks) * HEADS + h) * 4 + t', half
        const int pk = lane >> 3, pt = lane & 3, phalf = (lane >> 2) & 1;
#pragma unroll
        for (int vg = 0; vg < D / 32; ++vg) {
          if (vg >= ngroups) break;
          float sv_ = 0.f, zv = 0.f;
          if (packed) {
            sv_ = h2f(vsc[vg]);
            zv = h2f(vze[vg]);
            if constexpr (LOWER) {
              zv -= 0.5f * sv_;
              sv_ *= 0.0625f;
            }
          }
          if constexpr (SLIM) {
            // sum_t p z_t of the slice for all heads in one butterfly, into
            // the warp's running sum (rescaled by the slice's alpha).
            float zc[HEADS];
#pragma unroll
            for (int h = 0; h < HEADS; ++h) {
              zc[h] = ph[h] * zv;
              if (packed) pp_s[((((vg * 4 + pk) * HEADS + h) * 4 + pt) << 1) + phalf] = f16_bits(ph[h] * sv_);
            }
            const float zsum = warp_sum_many<HEADS>(zc, lane);
            if ((lane & (32 / HEADS - 1)) == 0) {
              const int h = lane >> (5 - LOG2H);
              zsum_s[h * gcap + vg] = zsum_s[h * gcap + vg] * alpha_s[h] + zsum;
            }
          } else {
#pragma unroll
            for (int h = 0; h < HEADS; ++h) {
              float& zz = zz_s[(h * gcap + vg) * 32 + lane];
              zz = zz * al[h] + ph[h] * zv;
              if (packed) pp_s[((((vg * 4 + pk) * HEADS + h) * 4 + pt) << 1) + phalf] = f16_bits(ph[h] * sv_);
            }
          }
        }
      }
      __syncwarp();

      if (packed) {
        const unsigned char* vb = st + sh.off_vc + ws * ROW + 4 * frag::qword(B, g);
        const unsigned* ppw = reinterpret_cast<const unsigned*>(pp_s) + bh * 4 + t;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          const int ta = 8 * ks + t, tb = ta + 4;
          unsigned wa[CB], wb[CB];  // this lane's word of each channel block, tokens ta and tb
          load_words<B, CB>(vb + ta * ROW, wa);
          load_words<B, CB>(vb + tb * ROW, wb);
          unsigned b0[NT], b1[NT];
          int cur_vg = -1;
#pragma unroll
          for (int cb = 0; cb < CB; ++cb) {
            const int vg = cb >> sh.log2_vgroup32;
            if (vg != cur_vg) {
#pragma unroll
              for (int nt = 0; nt < NT; ++nt) {
                const unsigned pair = ppw[((vg * 4 + ks) * HEADS + nt * 4) * 4];
                b0[nt] = frag::byte_perm(pair, 0u, sel_lo);
                b1[nt] = frag::byte_perm(pair, 0u, sel_hi);
              }
              cur_vg = vg;
            }
            unsigned a0, a1, a2, a3;
            if constexpr (LOWER) {
              const unsigned char* va = vb + ta * ROW + cb * 4 * B + (sh.off_vl - sh.off_vc);
              const unsigned char* vbb = vb + tb * ROW + cb * 4 * B + (sh.off_vl - sh.off_vc);
              a_regs<B, true>(wa[cb], wb[cb], lds32(va), lds32(vbb), g, a0, a1, a2, a3);
            } else {
              a_regs<B, false>(wa[cb], wb[cb], 0u, 0u, g, a0, a1, a2, a3);
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) mma16816(o[nt][cb], a0, a1, a2, a3, b0[nt], b1[nt]);
          }
        }
      } else {  // window rows: f32 products straight from the bf16 ring
        for (int tau = 0; tau < sv; ++tau) {
          const bf16* vrow = wv_g + std::int64_t((ps + tau) % c.win_cap) * D;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const float p0v = p_s[(nt * 4 + 2 * (t & 1)) * ps_stride + tau];
            const float p1v = p_s[(nt * 4 + 2 * (t & 1) + 1) * ps_stride + tau];
#pragma unroll
            for (int cb = 0; cb < CB; ++cb)
#pragma unroll
              for (int hi = 0; hi < 2; ++hi) {
                const float v = __bfloat162float(vrow[frag::pv_channel(B, g, t, cb, 2 * hi)]);
                o[nt][cb][2 * hi] += p0v * v;
                o[nt][cb][2 * hi + 1] += p1v * v;
              }
          }
        }
      }

      for (int i = 0; i < nrep; ++i) {  // exact values of the replaced rows
        const std::uint16_t* vr = a.rows.v + (rep_base + rep_s[32 + i]) * D;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e2 = 0; e2 < 2; ++e2) {
            const int h = nt * 4 + 2 * (t & 1) + e2;
            const float p = h < ncols && m_run[nt][e2] != -INFINITY ? exp2f(reps_s[i * HEADS + h] - m_run[nt][e2]) : 0.f;
#pragma unroll
            for (int cb = 0; cb < CB; ++cb)
#pragma unroll
              for (int hi = 0; hi < 2; ++hi) {
                const std::uint16_t raw = vr[frag::pv_channel(B, g, t, cb, 2 * hi)];
                const float v = a.rows.f16 ? h2f(raw) : __bfloat162float(__ushort_as_bfloat16(raw));
                o[nt][cb][2 * hi + e2] += p * v;
              }
          }
      }
      __syncwarp();  // p_s, pp_s, alpha_s and rep_s are rewritten by the next slice
    }
  }

  // Merge the four warps: l over the lanes of each head, the zero terms (one
  // column per lane) into o.
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e2 = 0; e2 < 2; ++e2) {
      float l = l_run[nt][e2];
#pragma unroll
      for (int off = 2; off < 32; off <<= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
      l_run[nt][e2] = l;
    }
  __syncwarp();
  if constexpr (!SLIM) {
    for (int i = lane; i < HEADS * ngroups; i += 32) {
      const int h = i / ngroups, vg = i - h * ngroups;
      const float* col = zz_s + (h * gcap + vg) * 32;
      float z = 0.f;
      for (int k = 0; k < 32; ++k) z += col[k];
      zsum_s[h * gcap + vg] = z;
    }
    __syncwarp();
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: reuse them for the merge
  float* fin = reinterpret_cast<float*>(smem);  // [warps][HEADS][D]
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int cb = 0; cb < CB; ++cb)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int h = nt * 4 + frag::head_in_tile(t, i);
        fin[(warp * HEADS + h) * D + frag::pv_channel(B, g, t, cb, i)] =
            o[nt][cb][i] + zsum_s[h * gcap + (cb >> sh.log2_vgroup32)];
      }
  if (g == 0) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e2 = 0; e2 < 2; ++e2) {
        const int h = nt * 4 + 2 * (t & 1) + e2;
        ml_s[(warp * HEADS + h) * 2 + 0] = m_run[nt][e2];
        ml_s[(warp * HEADS + h) * 2 + 1] = l_run[nt][e2];
      }
  }
  __syncthreads();
  detail::write_split_partials<D, warps>(
      a, blk, gq, kh, split, ml_s, HEADS, [&](int w, int h) { return fin + (w * HEADS + h) * D; }, tid, threads);
}


}  // namespace specpipe::kernels::cuda::v3::device
