// The split merge of the packed attention (Flash-Decoding) and the scores-to-
// probabilities pass (packed_attention.hpp): each split of packed_attention.cu
// leaves a partial output and its (max, sum) per (entry, head); these kernels
// weigh them by 2^(m_s - m) l_s.
#include <cuda_bf16.h>

#include <stdexcept>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/packed_attention.hpp"
#include "kernels/cuda/packed_combine.hpp"
#include "kernels/cuda/split_merge.cuh"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda {
namespace {

using detail::bf16;

// Element d of (entry e, head h): the merged output num / den, and the
// combined (max, sum) when asked for.
template <int D>
__device__ __forceinline__ void write_merged(const packed_attention_args& a, int e, int h, int d, std::int64_t bh,
                                             float m, float num, float den) {
  const std::int64_t at = std::int64_t(e) * a.ld_out + std::int64_t(h) * D + d;
  if (a.out_f32)
    a.out_f32[at] = num / den;
  else
    reinterpret_cast<bf16*>(a.out_bf16)[at] = __float2bfloat16(num / den);
  if (a.ml && d == 0) {
    a.ml[bh * 2 + 0] = m;
    a.ml[bh * 2 + 1] = den;
  }
}

// Merges the splits by their running max and sum (Flash-Decoding).
template <int D>
__global__ void packed_combine_kernel(packed_attention_args a) {
  detail::grid_dependency_wait();
  detail::allow_dependent_launch();
  const int h = blockIdx.x, e = blockIdx.y, d = threadIdx.x;
  const std::int64_t bh = std::int64_t(e) * a.n_heads + h;
  const auto [m, num, den] = detail::merge_splits<D>(
      a.partial + bh * a.splits * D,
      a.partial + std::int64_t(a.entries) * a.n_heads * a.splits * D + bh * a.splits * 2, a.splits, d);
  write_merged<D>(a, e, h, d, bh, m, num, den);
}

// The same merge with the split weights computed once per block
// (detail::merge_splits_staged).
template <int D>
__global__ void packed_combine_staged_kernel(packed_attention_args a) {
  detail::grid_dependency_wait();
  detail::allow_dependent_launch();
  extern __shared__ float wt_s[];  // [splits]
  const int h = blockIdx.x, e = blockIdx.y, d = threadIdx.x;
  const std::int64_t bh = std::int64_t(e) * a.n_heads + h;
  const auto [m, num, den] = detail::merge_splits_staged<D>(
      a.partial + bh * a.splits * D,
      a.partial + std::int64_t(a.entries) * a.n_heads * a.splits * D + bh * a.splits * 2, a.splits, d, wt_s);
  write_merged<D>(a, e, h, d, bh, m, num, den);
}

__global__ void packed_probs_kernel(const float* scores, float* probs, std::int64_t stride, const float* ml,
                                    const std::int32_t* entry_row, const std::int32_t* entry_len, int n_heads) {
  const int h = blockIdx.x, e = blockIdx.y;
  const int r = entry_row[e];
  if (r < 0) return;
  const std::int64_t bh = std::int64_t(e) * n_heads + h;
  const float m = ml[bh * 2], inv = __frcp_rn(ml[bh * 2 + 1]);
  const std::int64_t at = (std::int64_t(r) * n_heads + h) * stride;
  const int len = entry_len[e];
  for (int p = threadIdx.x; p < len; p += blockDim.x) probs[at + p] = __fmul_rn(exp2f(__fsub_rn(scores[at + p], m)), inv);
}

}  // namespace

void packed_combine(const packed_attention_args& a, stream_t s) {
  const dim3 cgrid(unsigned(a.n_heads), unsigned(a.entries));
  const std::size_t wbytes = std::size_t(a.splits) * 4;
  const auto st = as_stream(s);
  if (a.combine == 1 && a.cache.head_dim == 128)
    detail::launch_kernel(packed_combine_staged_kernel<128>, cgrid, dim3(128), wbytes, st, a.dependent, a);
  else if (a.combine == 1)
    detail::launch_kernel(packed_combine_staged_kernel<64>, cgrid, dim3(64), wbytes, st, a.dependent, a);
  else if (a.cache.head_dim == 128)
    detail::launch_kernel(packed_combine_kernel<128>, cgrid, dim3(128), 0, st, a.dependent, a);
  else
    detail::launch_kernel(packed_combine_kernel<64>, cgrid, dim3(64), 0, st, a.dependent, a);
  CUDA_CHECK_LAUNCH();
}

void packed_attention_probs(const float* scores, float* probs, std::int64_t stride, const float* ml,
                            const std::int32_t* entry_scores_row, const std::int32_t* entry_len, int entries,
                            int n_heads, stream_t s) {
  if (entries <= 0) return;
  if (!scores || !probs || !ml || !entry_scores_row || !entry_len || stride < 1 || n_heads < 1)
    throw std::invalid_argument("packed_attention_probs: scores, probs, ml, entry rows and lengths are required");
  packed_probs_kernel<<<dim3(unsigned(n_heads), unsigned(entries)), 256, 0, as_stream(s)>>>(
      scores, probs, stride, ml, entry_scores_row, entry_len, n_heads);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda
