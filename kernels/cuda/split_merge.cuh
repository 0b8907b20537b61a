#pragma once
// The Flash-Decoding merge every split attention kernel ends with (decode,
// quantized and packed attention): each split left a partial output o_s
// (normalized by its own sum) and its running (max m_s, sum l_s) in the log2
// domain; element d of the merged output is num / den with
// w_s = l_s 2^(m_s - m), num = sum_s w_s o_s[d], den = sum_s w_s, over the
// splits that saw any position (l_s > 0). CUDA-only.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda::detail {

struct merged_splits {
  float m, num, den;
};

// part_o: [splits][D] of one (entry, head); ml: [splits][2].
template <int D>
__device__ __forceinline__ merged_splits merge_splits(const float* part_o, const float* ml, int splits, int d) {
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s)
    if (ml[2 * s + 1] > 0.f) m = fmaxf(m, ml[2 * s]);
  float num = 0.f, den = 0.f;
  for (int s = 0; s < splits; ++s) {
    const float l = ml[2 * s + 1];
    if (l > 0.f) {
      const float w = l * exp2f(ml[2 * s] - m);
      num = fmaf(w, part_o[s * D + d], num);
      den += w;
    }
  }
  return {m, num, den};
}

// The same merge by a whole block of D threads (thread d computes element
// d), with the split weights computed once per block: the threads take the
// splits in parallel (max, then w_s = 2^(m_s - m) l_s into wt_s and their
// sum), then each element loads its splits' partials unconditionally (a
// select drops empty splits, whose partials were never written), so several
// splits' loads are in flight at once instead of one dependent round trip per
// split. wt_s: shared memory for `splits` floats. Contains barriers: every
// thread of the block must call it.
template <int D>
__device__ __forceinline__ merged_splits merge_splits_staged(const float* part_o, const float* ml, int splits, int d,
                                                             float* wt_s) {
  __shared__ float red_s[D / 32];
  const int lane = d & 31, warp = d >> 5;
  float m = -INFINITY;
  for (int s = d; s < splits; s += D)
    if (ml[2 * s + 1] > 0.f) m = fmaxf(m, ml[2 * s]);
  m = warp_max(m);
  if (lane == 0) red_s[warp] = m;
  __syncthreads();
  m = red_s[0];
#pragma unroll
  for (int w = 1; w < D / 32; ++w) m = fmaxf(m, red_s[w]);
  __syncthreads();  // red_s is reused for the sum
  float den = 0.f;
  for (int s = d; s < splits; s += D) {
    const float l = ml[2 * s + 1];
    const float w = l > 0.f ? exp2f(ml[2 * s] - m) * l : 0.f;
    wt_s[s] = w;
    den += w;
  }
  den = warp_sum(den);
  if (lane == 0) red_s[warp] = den;
  __syncthreads();
  den = 0.f;
#pragma unroll
  for (int w = 0; w < D / 32; ++w) den += red_s[w];
  float num = 0.f;
#pragma unroll 8
  for (int s = 0; s < splits; ++s) {
    const float w = wt_s[s];
    const float x = part_o[s * D + d];
    num = w > 0.f ? fmaf(w, x, num) : num;
  }
  return {m, num, den};
}

}  // namespace specpipe::kernels::cuda::detail
