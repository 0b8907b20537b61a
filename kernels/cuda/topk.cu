// GQA-averaged top-k on the GPU (see topk.hpp), in two stages so that a long
// row spreads over many SMs (v1 ran one 512-thread block per (row, KV head):
// its loads, one dependent L2 round trip per loop iteration, took 214-270 us
// for a 32k row on the H200, longer than the layer of compute it was meant
// to hide under).
//
//  Stage 1, one block per (chunk of 2048 positions, KV head, row):
//    sum[j] = sum over the group's heads, in order, of p_h[j] (the mean's
//    order without the mean's rounding, as the CPU ranks) into shared
//    memory (the excluded position ineligible), then the chunk's own top
//    min(k, eligible) by the strict order (value desc, position asc),
//    written sorted to the scratch with their count.
//  Stage 2, one block per (KV head, row): the top min(k, eligible) of the
//    chunks' candidates, by the same order. Every member of the row's top-k
//    is in its chunk's top-k (fewer than k of its chunk precede it), so the
//    result is the one-pass result.
//
// Selecting, in both stages (select_sorted): a radix select on the bit
// patterns (non-negative floats order like their bits), passes of a 256-bin
// histogram of eight bits among the values sharing the bits chosen so far,
// starting below the bits all values share, gives the k-th largest value T
// and how many ties with T are taken; every value > T is gathered, then the
// ties in list order, which is position order (stage 1 lists positions
// ascending; stage 2 lists chunks in order, each sorted with its ties by
// ascending position); the k are ranked by (value desc, position asc).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/topk.hpp"

namespace specpipe::kernels::cuda {
namespace {

constexpr int chunk_len = topk_chunk_len;  // stage 1 positions per block
constexpr int local_threads = 256;   // stage 1
constexpr int merge_threads = 512;   // stage 2
constexpr unsigned ineligible = 0xffffffffu;  // never a non-negative float's bit pattern

constexpr int slot_cap = topk_chunk_slots;  // candidates each chunk keeps room for

__host__ __device__ int chunks_of(int len) { return (len + chunk_len - 1) / chunk_len; }

struct select_smem {
  unsigned hist[256];
  unsigned sel_key[topk_max_k];
  int sel_pos[topk_max_k];
  int warp_counts[32];
  unsigned prefix, remaining;
  unsigned key_or, key_and;  // over the eligible keys: the bits they share
  int n_sel, n_eq_taken, n_eq_slot;
};

// The k (>= 1) largest of items 0 .. n-1 by (key desc, position asc), ties
// with the k-th taken in item order (which must be position order among
// equal keys). Writes out_pos[rank] (and out_key[rank] when given).
template <int T, class KeyAt, class PosAt>
__device__ void select_sorted(select_smem& sm, KeyAt key_at, PosAt pos_at, int n, int k, int* out_pos,
                              unsigned* out_key, bool fixed_digits) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0) {
    sm.remaining = unsigned(k);
    sm.n_sel = 0;
    sm.n_eq_taken = 0;
    sm.n_eq_slot = 0;
    sm.key_or = 0;
    sm.key_and = ~0u;
  }
  __syncthreads();
  // The bits every eligible key shares need no pass: probabilities of one
  // chunk mostly sit within a few powers of two, so a first digit of fixed
  // bits (24-31, one bin per factor of 4) put nearly all keys into one or
  // two bins, whose shared atomics then serialized. The passes start at the
  // highest bit where the keys differ instead; the selection is the same.
  {
    unsigned o = 0, a = ~0u;
    for (int i = tid; i < n; i += T) {
      const unsigned key = key_at(i);
      if (key != ineligible) {
        o |= key;
        a &= key;
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      o |= __shfl_xor_sync(0xffffffffu, o, off);
      a &= __shfl_xor_sync(0xffffffffu, a, off);
    }
    if (lane == 0) {
      atomicOr(&sm.key_or, o);
      atomicAnd(&sm.key_and, a);
    }
  }
  __syncthreads();
  const unsigned differ = sm.key_or ^ sm.key_and;
  const int top = fixed_digits ? 31 : differ ? 31 - __clz(int(differ)) : -1;  // highest bit the keys disagree on
  unsigned mask = top < 0 ? ~0u : ~((2u << top) - 1u);    // the bits above it (top 31: none)
  if (tid == 0) sm.prefix = sm.key_and & mask;
  __syncthreads();
  for (int hi = top; hi >= 0; hi -= 8) {
    // The last digit may reach above bit `hi` into bits already fixed: the
    // keys still counted agree on them, so their bins are the prefix's.
    const int shift = hi >= 7 ? hi - 7 : 0;
    for (int i = tid; i < 256; i += T) sm.hist[i] = 0;
    __syncthreads();
    const unsigned prefix = sm.prefix;
    // Plain shared atomics: warp-aggregating them (__match_any_sync) measured
    // slower on the H200 (local stage 128 against 115 us, batch 8 at 32k).
    for (int i = tid; i < n; i += T) {
      const unsigned key = key_at(i);
      if (key != ineligible && (key & mask) == prefix) atomicAdd(&sm.hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    // The digit d holding the need-th largest: walking bins 255 down to 1
    // until the count reaches `need` (d = 0 when it never does). Warp 0
    // does it as a scan: lane j sums bins 255 - 8j .. 248 - 8j, the first
    // lane whose running total reaches `need` walks its eight.
    if (warp == 0) {
      const unsigned need = sm.remaining;
      unsigned c[8], tot = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        c[j] = sm.hist[255 - (lane * 8 + j)];
        tot += c[j];
      }
      unsigned inc = tot;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const unsigned v = __shfl_up_sync(0xffffffffu, inc, off);
        if (lane >= off) inc += v;
      }
      const unsigned reached = __ballot_sync(0xffffffffu, inc >= need);
      const int first = reached ? __ffs(reached) - 1 : 31;
      if (lane == first) {
        unsigned above = inc - tot;
        int j = 0;
        for (; j < 7; ++j) {
          if (above + c[j] >= need) break;
          above += c[j];
        }
        sm.prefix = prefix | (unsigned(255 - (lane * 8 + j)) << shift);
        sm.remaining = need - above;
      }
    }
    mask |= 255u << shift;
    __syncthreads();
  }
  const unsigned thr = sm.prefix;
  const int need_eq = int(sm.remaining);  // ties with thr among the k; the rest are > thr

  // Everything above thr, and the ties counted; while their count is unknown
  // the first need_eq ties met take the tie slots. When the ties are exactly
  // need_eq (the usual case: one key equals the k-th largest), that is the
  // answer, since the ranking below orders them; only when there are more
  // does the ordered pass after it choose the lowest positions.
  for (int i0 = 0; i0 < n; i0 += T) {
    const int i = i0 + tid;
    const unsigned key = i < n ? key_at(i) : ineligible;
    const bool above = key != ineligible && key > thr;
    const bool eq = i < n && key == thr;
    if (above) {
      const int at = atomicAdd(&sm.n_sel, 1);
      sm.sel_key[at] = key;
      sm.sel_pos[at] = pos_at(i);
    }
    const unsigned ties = __ballot_sync(0xffffffffu, eq);
    if (ties) {
      int base = 0;
      if (lane == 0) base = atomicAdd(&sm.n_eq_slot, __popc(ties));
      base = __shfl_sync(0xffffffffu, base, 0) + __popc(ties & ((1u << lane) - 1u));
      if (eq && base < need_eq) {
        sm.sel_key[k - need_eq + base] = thr;
        sm.sel_pos[k - need_eq + base] = pos_at(i);
      }
    }
  }
  __syncthreads();
  const bool ordered_ties = sm.n_eq_slot > need_eq;
  for (int i0 = 0; ordered_ties && i0 < n; i0 += T) {  // the first ties in item order
    if (sm.n_eq_taken >= need_eq) break;  // uniform: read after the barrier below
    const int i = i0 + tid;
    const bool eq = i < n && key_at(i) == thr;
    const unsigned ballot = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) sm.warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = sm.n_eq_taken + __popc(ballot & ((1u << lane) - 1u));
    for (int w = 0; w < warp; ++w) before += sm.warp_counts[w];
    if (eq && before < need_eq) {
      const int at = k - need_eq + before;  // after the k - need_eq larger ones
      sm.sel_key[at] = thr;
      sm.sel_pos[at] = pos_at(i);
    }
    __syncthreads();
    if (tid == 0) {
      int total = 0;
      for (int w = 0; w < T / 32; ++w) total += sm.warp_counts[w];
      sm.n_eq_taken += total;
    }
    __syncthreads();
  }
  __syncthreads();
  for (int i = tid; i < k; i += T) {  // rank: value descending, then position ascending
    const unsigned ki = sm.sel_key[i];
    const int pi = sm.sel_pos[i];
    int rank = 0;
    for (int m = 0; m < k; ++m) {
      const unsigned km = sm.sel_key[m];
      rank += (km > ki || (km == ki && sm.sel_pos[m] < pi)) ? 1 : 0;
    }
    out_pos[rank] = pi;
    if (out_key) out_key[rank] = ki;
  }
}

// Scratch of one (row, KV head): per chunk slot_cap keys, slot_cap positions, a count.
struct chunk_scratch {
  unsigned* keys;
  int* pos;
  int* count;
};
__device__ chunk_scratch scratch_of(const topk_args& a, int r, int g) {
  const int chunks = chunks_of(a.max_len);
  unsigned* base = reinterpret_cast<unsigned*>(a.scratch) +
                   (std::int64_t(r) * a.n_kv_heads + g) * std::int64_t(chunks) * (2 * slot_cap + 1);
  return {base, reinterpret_cast<int*>(base) + chunks * slot_cap, reinterpret_cast<int*>(base) + 2 * chunks * slot_cap};
}

__global__ void __launch_bounds__(local_threads) topk_local_kernel(topk_args a) {
  const int chunk = blockIdx.x, g = blockIdx.y, r = blockIdx.z;
  const int tid = threadIdx.x;
  const int len = a.row_len[r];
  const int c0 = chunk * chunk_len;
  const chunk_scratch cs = scratch_of(a, r, g);
  if (c0 >= len || a.k == 0) {
    if (tid == 0) cs.count[chunk] = 0;
    return;
  }
  const int n = min(chunk_len, len - c0);
  const int excl = a.row_exclude ? a.row_exclude[r] : -1;
  const int group = a.n_heads / a.n_kv_heads;
  const std::int64_t ml_stride = a.ml_row_stride > 0 ? a.ml_row_stride : std::int64_t(a.n_heads) * 2;
  __shared__ unsigned keys[chunk_len];
  __shared__ select_smem sm;
  __shared__ int elig_s;
  // The group's (max, 1 / sum), once per block (the same f32 values as
  // computing them per position).
  __shared__ float m_s[64], r_s[64];
  if (tid == 0) elig_s = 0;
  if (a.ml && tid < group && tid < 64) {
    const float* ml = a.ml + std::int64_t(r) * ml_stride + (g * group + tid) * 2;
    m_s[tid] = ml[0];
    r_s[tid] = __frcp_rn(ml[1]);
  }
  __syncthreads();
  const float* base = a.values + std::int64_t(r) * a.n_heads * a.stride + c0;
  // Each thread's chunk_len / local_threads positions: one head at a time,
  // all of a head's loads issued together (one memory round trip per head,
  // not one per position and head), summed in head order as before.
  constexpr int per_thread = chunk_len / local_threads;
  static_assert(chunk_len % local_threads == 0, "whole positions per thread");
  float sum[per_thread];
#pragma unroll
  for (int u = 0; u < per_thread; ++u) sum[u] = 0.f;
  for (int h = g * group; h < (g + 1) * group; ++h) {
    float m = 0.f, rl = 1.f;
    if (a.ml) {  // packed_attention_probs' value, bit for bit
      const int hi = h - g * group;
      if (hi < 64) {
        m = m_s[hi];
        rl = r_s[hi];
      } else {
        const float* ml = a.ml + std::int64_t(r) * ml_stride + h * 2;
        m = ml[0];
        rl = __frcp_rn(ml[1]);
      }
    }
    const float* row = base + std::int64_t(h) * a.stride;
    float p[per_thread];
#pragma unroll
    for (int u = 0; u < per_thread; ++u) {
      const int i = tid + u * local_threads;
      p[u] = i < n ? __ldg(row + i) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < per_thread; ++u) {
      const float q = a.ml ? __fmul_rn(exp2f(__fsub_rn(p[u], m)), rl) : p[u];
      sum[u] = __fadd_rn(sum[u], q);
    }
  }
  int mine = 0;  // eligible positions of this thread
#pragma unroll
  for (int u = 0; u < per_thread; ++u) {
    const int i = tid + u * local_threads;
    if (i < n) {
      const bool out = c0 + i == excl;
      // Ranked by the sum, as the CPU ranks (cpu::topk_gqa): the mean's
      // order, but a product with an inexact 1 / group (a group of 3, 5 or
      // 7) or one rounding denormal sums would tie sums that differ.
      keys[i] = out ? ineligible : __float_as_uint(sum[u]);
      mine += out ? 0 : 1;
    }
  }
  if (mine) atomicAdd(&elig_s, mine);
  __syncthreads();
  const int kk = min(a.k, elig_s);
  if (kk > 0)
    select_sorted<local_threads>(
        sm, [&](int i) { return keys[i]; }, [&](int i) { return c0 + i; }, n, kk, cs.pos + chunk * slot_cap,
        cs.keys + chunk * slot_cap, a.fixed_digits);
  if (tid == 0) cs.count[chunk] = kk;
}

__global__ void __launch_bounds__(merge_threads) topk_merge_kernel(topk_args a) {
  const int g = blockIdx.x, r = blockIdx.y;
  const int tid = threadIdx.x;
  const int len = a.row_len[r];
  const int chunks = chunks_of(len);
  const int stride = min(a.k, slot_cap);  // candidate slots per chunk in the item list
  const chunk_scratch cs = scratch_of(a, r, g);
  __shared__ select_smem sm;
  __shared__ int total_s;
  if (tid == 0) total_s = 0;
  __syncthreads();
  for (int c = tid; c < chunks; c += merge_threads) atomicAdd(&total_s, cs.count[c]);
  __syncthreads();
  const int k = min(a.k, total_s);
  if (tid == 0) a.count[std::int64_t(r) * a.n_kv_heads + g] = k;
  if (k == 0) return;
  // Item i: slot i % stride of chunk i / stride (ineligible past its count).
  auto key_at = [&](int i) {
    const int c = i / stride, j = i - c * stride;
    return j < cs.count[c] ? cs.keys[c * slot_cap + j] : ineligible;
  };
  auto pos_at = [&](int i) {
    const int c = i / stride;
    return cs.pos[c * slot_cap + (i - c * stride)];
  };
  select_sorted<merge_threads>(sm, key_at, pos_at, chunks * stride, k,
                               a.positions + (std::int64_t(r) * a.n_kv_heads + g) * a.k, nullptr, a.fixed_digits);
}

}  // namespace

void topk_gqa(const topk_args& a, stream_t s) {
  if (a.rows <= 0) return;
  auto fail = [](const std::string& what) { throw std::invalid_argument("topk_gqa: " + what); };
  if (a.n_kv_heads <= 0 || a.n_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    fail("n_heads " + std::to_string(a.n_heads) + " is not a positive multiple of n_kv_heads " +
         std::to_string(a.n_kv_heads));
  if (a.k < 0 || a.k > topk_max_k) fail("k " + std::to_string(a.k) + " outside [0, " + std::to_string(topk_max_k) + "]");
  if (!a.values || !a.row_len || !a.positions || !a.count || !a.scratch || a.max_len < 1 || a.stride < a.max_len)
    fail("values, lengths, outputs and scratch must be given, stride >= max_len >= 1");
  topk_local_kernel<<<dim3(unsigned(chunks_of(a.max_len)), unsigned(a.n_kv_heads), unsigned(a.rows)), local_threads, 0,
                      as_stream(s)>>>(a);
  CUDA_CHECK_LAUNCH();
  topk_merge_kernel<<<dim3(unsigned(a.n_kv_heads), unsigned(a.rows)), merge_threads, 0, as_stream(s)>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda
