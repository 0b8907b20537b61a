// GQA-averaged top-k on the GPU (see topk.hpp). One block per (row, KV
// head), 512 threads:
//  1. avg[j] = (sum over the group's heads, in order, of p_h[j]) * (1 / group),
//     the excluded position marked ineligible; written to the scratch.
//  2. Radix select on the bit patterns (non-negative floats order like their
//     bits): four passes, each a 256-bin histogram of one byte among the
//     values that share the bytes chosen so far; the k-th largest value T and
//     how many of the k are ties with T come out.
//  3. Gather every value > T (any order) and the lowest-position ties (an
//     ordered block scan), then rank the k by (value desc, position asc).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/topk.hpp"

namespace specpipe::kernels::cuda {
namespace {

constexpr int threads = 512;
constexpr unsigned ineligible = 0xffffffffu;  // never a non-negative float's bit pattern

__global__ void __launch_bounds__(threads) topk_kernel(topk_args a) {
  const int g = blockIdx.x, r = blockIdx.y;
  const int tid = threadIdx.x;
  const int group = a.n_heads / a.n_kv_heads;
  const int len = a.row_len[r];
  const int excl = a.row_exclude ? a.row_exclude[r] : -1;
  unsigned* keys = reinterpret_cast<unsigned*>(a.scratch) + (std::int64_t(r) * a.n_kv_heads + g) * a.max_len;
  std::int32_t* out = a.positions + (std::int64_t(r) * a.n_kv_heads + g) * a.k;

  __shared__ unsigned hist[256];
  __shared__ unsigned sel_key[topk_max_k];
  __shared__ int sel_pos[topk_max_k];
  __shared__ int n_sel, n_eq_taken, warp_counts[threads / 32];
  __shared__ unsigned prefix_s, remaining_s;

  const std::int64_t ml_stride = a.ml_row_stride > 0 ? a.ml_row_stride : std::int64_t(a.n_heads) * 2;
  // 1. Averages over the group's heads.
  const float inv = 1.0f / float(group);
  const float* base = a.values + std::int64_t(r) * a.n_heads * a.stride;
  for (int j = tid; j < len; j += threads) {
    float s = 0.f;
    for (int h = g * group; h < (g + 1) * group; ++h) {
      float p = base[std::int64_t(h) * a.stride + j];
      if (a.ml) {
        const float* ml = a.ml + std::int64_t(r) * ml_stride + h * 2;
        p = __fmul_rn(exp2f(__fsub_rn(p, ml[0])), __frcp_rn(ml[1]));  // packed_attention_probs' value, bit for bit
      }
      s = __fadd_rn(s, p);
    }
    keys[j] = j == excl ? ineligible : __float_as_uint(__fmul_rn(s, inv));
  }
  const int eligible = len - (excl >= 0 && excl < len ? 1 : 0);
  const int k = min(a.k, eligible);
  if (tid == 0) {
    a.count[std::int64_t(r) * a.n_kv_heads + g] = k;
    prefix_s = 0;
    remaining_s = unsigned(k);
    n_sel = 0;
    n_eq_taken = 0;
  }
  __syncthreads();
  if (k == 0) return;

  // 2. Radix select of the k-th largest bit pattern.
  unsigned mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += threads) hist[i] = 0;
    __syncthreads();
    const unsigned prefix = prefix_s;
    // Warp-aggregated: probabilities of one row share their top bytes, so
    // one atomic per distinct bin per warp instead of one per key (v1's
    // per-key atomics serialized on one bin: 214 us for 8 rows of 32k on the
    // H200).
    for (int j0 = 0; j0 < len; j0 += threads) {
      const int j = j0 + tid;
      unsigned bin = 256u;
      if (j < len) {
        const unsigned key = keys[j];
        if (key != ineligible && (key & mask) == prefix) bin = (key >> shift) & 255u;
      }
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (bin < 256u && (tid & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], unsigned(__popc(peers)));
    }
    __syncthreads();
    if (tid == 0) {
      unsigned need = remaining_s, above = 0;
      int d = 255;
      for (; d > 0; --d) {
        if (above + hist[d] >= need) break;
        above += hist[d];
      }
      prefix_s = prefix | (unsigned(d) << shift);
      remaining_s = need - above;
    }
    mask |= 255u << shift;
    __syncthreads();
  }
  const unsigned T = prefix_s;
  const int need_eq = int(remaining_s);  // ties with T among the k; the rest are > T

  // 3a. Everything above T.
  for (int j = tid; j < len; j += threads) {
    const unsigned key = keys[j];
    if (key != ineligible && key > T) {
      const int at = atomicAdd(&n_sel, 1);
      sel_key[at] = key;
      sel_pos[at] = j;
    }
  }
  __syncthreads();
  // 3b. The lowest positions equal to T, in position order.
  const int lane = tid & 31, warp = tid >> 5;
  for (int j0 = 0; j0 < len; j0 += threads) {
    if (n_eq_taken >= need_eq) break;  // uniform: read after the barrier below
    const int j = j0 + tid;
    const bool eq = j < len && keys[j] == T;
    const unsigned ballot = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = n_eq_taken + __popc(ballot & ((1u << lane) - 1u));
    for (int w = 0; w < warp; ++w) before += warp_counts[w];
    if (eq && before < need_eq) {
      const int at = k - need_eq + before;  // after the n_sel = k - need_eq larger ones
      sel_key[at] = T;
      sel_pos[at] = j;
    }
    __syncthreads();
    if (tid == 0) {
      int total = 0;
      for (int w = 0; w < threads / 32; ++w) total += warp_counts[w];
      n_eq_taken += total;
    }
    __syncthreads();
  }
  // 3c. Rank: value descending, then position ascending (a strict order).
  for (int i = tid; i < k; i += threads) {
    const unsigned ki = sel_key[i];
    const int pi = sel_pos[i];
    int rank = 0;
    for (int m = 0; m < k; ++m) {
      const unsigned km = sel_key[m];
      rank += (km > ki || (km == ki && sel_pos[m] < pi)) ? 1 : 0;
    }
    out[rank] = pi;
  }
}

}  // namespace

std::size_t topk_scratch_floats(int rows, int n_kv_heads, int max_len) {
  return std::size_t(rows) * std::size_t(n_kv_heads) * std::size_t(max_len);
}

void topk_gqa(const topk_args& a, stream_t s) {
  if (a.rows <= 0) return;
  auto fail = [](const std::string& what) { throw std::invalid_argument("topk_gqa: " + what); };
  if (a.n_kv_heads <= 0 || a.n_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    fail("n_heads " + std::to_string(a.n_heads) + " is not a positive multiple of n_kv_heads " +
         std::to_string(a.n_kv_heads));
  if (a.k < 0 || a.k > topk_max_k) fail("k " + std::to_string(a.k) + " outside [0, " + std::to_string(topk_max_k) + "]");
  if (!a.values || !a.row_len || !a.positions || !a.count || !a.scratch || a.max_len < 1 || a.stride < a.max_len)
    fail("values, lengths, outputs and scratch must be given, stride >= max_len >= 1");
  topk_kernel<<<dim3(unsigned(a.n_kv_heads), unsigned(a.rows)), threads, 0, as_stream(s)>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda
