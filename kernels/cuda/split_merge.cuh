#pragma once
// The Flash-Decoding merge every split attention kernel ends with (decode,
// quantized and packed attention): each split left a partial output o_s
// (normalized by its own sum) and its running (max m_s, sum l_s) in the log2
// domain; element d of the merged output is num / den with
// w_s = l_s 2^(m_s - m), num = sum_s w_s o_s[d], den = sum_s w_s, over the
// splits that saw any position (l_s > 0). CUDA-only.
#include <cuda_runtime.h>

#include <cmath>

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

}  // namespace specpipe::kernels::cuda::detail
