#pragma once
// What one block of the packed decode attention (v3, packed_attention.cu,
// and v4, packed_attention_v4_kernel.cuh) covers, and how it writes its
// split's partial rows. A block is (split, KV head, entry or multi-query
// block): its query columns are head h % gq of entry e + h / gq; its
// positions are the split's run of 128-position tiles, the packed ones
// first (the rule of packed_attention_tiles). CUDA-only.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/packed_attention.hpp"

namespace specpipe::kernels::cuda::detail {

struct packed_block {
  int e = 0;       // first entry
  int nqry = 1;    // entries (query rows) of the block
  int ncols = 0;   // real columns: nqry x gq
  int slot = 0;    // the entries' cache slot
  int len = 0;     // positions of the longest row: it sets the tiles
  int nq = 0;      // packed positions attended
  int ptiles = 0;  // tiles over the packed part
  int first = 0, last = 0;  // the split's tiles [first, last)

  // Row of column h in the (entry, head) outputs.
  __device__ __forceinline__ std::int64_t column_row(const packed_attention_args& a, int gq, int kh, int h) const {
    const int qi = h / gq;
    return std::int64_t(e + qi) * a.n_heads + std::int64_t(kh) * gq + (h - qi * gq);
  }
};

template <int TILE>
__device__ __forceinline__ packed_block packed_block_of(const packed_attention_args& a, int gq, int split) {
  packed_block b;
  const bool multi = a.block_first != nullptr;
  b.e = multi ? a.block_first[blockIdx.z] : int(blockIdx.z);
  b.nqry = multi ? a.block_count[blockIdx.z] : 1;
  b.ncols = b.nqry * gq;
  b.slot = a.entry_slot[b.e];
  b.len = a.entry_len[b.e + b.nqry - 1];
  b.nq = min(a.entry_quant[b.e], b.len);
  b.ptiles = (b.nq + TILE - 1) / TILE;
  const int tiles = b.ptiles + (b.len - b.nq + TILE - 1) / TILE;
  const int eff = min(a.splits, tiles);
  const int per_split = (tiles + eff - 1) / eff;
  b.first = split * per_split;
  b.last = min(tiles, b.first + per_split);
  return b;
}

// The arrays of one (slot, KV head) run of the device cache.
struct packed_run {
  const unsigned char *k_codes, *k_lower, *v_codes, *v_lower;  // lower planes: INT8 reads only
  const std::uint16_t *k_scale, *k_zero, *v_scale, *v_zero;
  const std::uint16_t *win_k, *win_v;  // bf16 window rings, win_cap rows each
};

template <bool LOWER>
__device__ __forceinline__ packed_run packed_run_of(const packed_cache_view& c, int slot, int kh) {
  const std::int64_t run = std::int64_t(slot) * c.n_kv_heads + kh;
  return {c.k_codes + run * c.k_run,  LOWER ? c.k_lower + run * c.k_run : nullptr,
          c.v_codes + run * c.v_run,  LOWER ? c.v_lower + run * c.v_run : nullptr,
          c.k_scale + run * c.ks_run, c.k_zero + run * c.ks_run,
          c.v_scale + run * c.vs_run, c.v_zero + run * c.vs_run,
          c.win_k + run * c.win_cap * c.head_dim, c.win_v + run * c.win_cap * c.head_dim};
}

// The partial outputs: [entries x heads][splits][D] values, then [..][splits][2] (m, l).
template <int D>
__device__ __forceinline__ float* partial_ml(const packed_attention_args& a) {
  return a.partial + std::int64_t(a.entries) * a.n_heads * a.splits * D;
}

// A split without tiles: its columns' (m, l) = (-inf, 0), which the combine skips.
template <int D>
__device__ __forceinline__ void write_empty_split(const packed_attention_args& a, const packed_block& b, int gq, int kh,
                                                  int split, int tid) {
  if (tid < b.ncols) {
    float* ml = partial_ml<D>(a) + (b.column_row(a, gq, kh, tid) * a.splits + split) * 2;
    ml[0] = -INFINITY;
    ml[1] = 0.f;
  }
}

// The block's warps each left, per column h, a running (m, l) at
// ml_s[(w * stride + h) * 2] and its rows at row(w, h) (a float* to D
// values); merged into the split's partial row by the whole block.
template <int D, int WARPS, class Rows>
__device__ __forceinline__ void write_split_partials(const packed_attention_args& a, const packed_block& b, int gq,
                                                     int kh, int split, const float* ml_s, int stride, Rows row,
                                                     int tid, int threads) {
  float* part_ml = partial_ml<D>(a);
  for (int idx = tid; idx < b.ncols * D; idx += threads) {
    const int h = idx / D, ch = idx - h * D;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS; ++w)
      if (ml_s[(w * stride + h) * 2 + 1] > 0.f) m = fmaxf(m, ml_s[(w * stride + h) * 2]);
    float num = 0.f, den = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float l = ml_s[(w * stride + h) * 2 + 1];
      if (l > 0.f) {
        const float wt = exp2f(ml_s[(w * stride + h) * 2] - m);
        num = fmaf(wt, row(w, h)[ch], num);
        den = fmaf(wt, l, den);
      }
    }
    const std::int64_t bh = b.column_row(a, gq, kh, h);
    a.partial[(bh * a.splits + split) * D + ch] = den > 0.f ? num / den : 0.f;
    if (ch == 0) {
      part_ml[(bh * a.splits + split) * 2 + 0] = m;
      part_ml[(bh * a.splits + split) * 2 + 1] = den;
    }
  }
}

}  // namespace specpipe::kernels::cuda::detail
