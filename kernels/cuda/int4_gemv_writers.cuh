#pragma once
// The writers of the 4-bit GEMV's tensor-core blocks (int4_gemv.cu, v2-v4
// and v7): a block's 16 rows, each warp's partial sums over its chunks
// merged in a fixed order through shared memory, then written to y as it is
// (bf16 or f32, added to or not), as the SwiGLU epilogue, or over a qkv
// weight in RoPE pair order with RoPE and the cache append as the epilogue.
// CUDA-only (included from int4_gemv.cu).
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/rope_rotate.cuh"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda::detail {

constexpr int int4_block_warps = 8;  // warps of a block, each with its partial sums of the 16 rows
using int4_parts = float[int4_block_warps][16][8];

// The block's 16 rows: each warp's partial sums over its chunks, merged in a
// fixed order through shared memory, then written (or added) to y.
// The warp's C fragment (rows g and g + 8, columns 2t and 2t + 1) into the
// block's partials, then a barrier: the writers below sum over warps.
__device__ __forceinline__ void stash_parts(int4_parts& part_s, const float (&acc)[4], int warp, int g,
                                            int t) {
  part_s[warp][g][2 * t] = acc[0];
  part_s[warp][g][2 * t + 1] = acc[1];
  part_s[warp][g + 8][2 * t] = acc[2];
  part_s[warp][g + 8][2 * t + 1] = acc[3];
  __syncthreads();
}

// Row r, column i of the partials summed over warps w0 .. w0 + count - 1 in
// order: every writer's sum, so that the paths agree bit for bit.
__device__ __forceinline__ float sum_parts(const int4_parts& part_s, int r, int i, int w0 = 0,
                                           int count = int4_block_warps) {
  float v = 0.f;
#pragma unroll
  for (int w = 0; w < count; ++w) v += part_s[w0 + w][r][i];
  return v;
}

template <bool OutF32>
__device__ __forceinline__ void mma_write_rows(int4_parts& part_s, const float (&acc)[4], int warp,
                                               int g, int t, std::int64_t row0, void* __restrict__ y,
                                               std::int64_t ldy, bool accumulate, int m, std::int64_t n) {
  stash_parts(part_s, acc, warp, g, t);
  if (threadIdx.x < 128) {
    const int r = threadIdx.x >> 3, i = threadIdx.x & 7;
    const float v = sum_parts(part_s, r, i);
    const std::int64_t row = row0 + r;
    if (i < m && row < n) {
      if constexpr (OutF32) {
        float* yp = static_cast<float*>(y) + i * ldy + row;
        *yp = accumulate ? *yp + v : v;
      } else {
        static_cast<bf16*>(y)[i * ldy + row] = __float2bfloat16(v);
      }
    }
  }
}

// The SwiGLU epilogue of v7 (gemm_out::swiglu): warps 0-3 hold gate rows
// row0 .. row0 + 15, warps 4-7 the up rows of the same outputs; each is
// rounded to bf16 first, as the unfused path stores them, then
// silu(gate) * up in f32 with the SwiGLU kernel's silu (activation.cu).
__device__ __forceinline__ void swiglu_write_rows(int4_parts& part_s, const float (&acc)[4], int warp,
                                                  int g, int t, std::int64_t row0, void* __restrict__ y,
                                                  std::int64_t ldy, int m, std::int64_t inter) {
  stash_parts(part_s, acc, warp, g, t);
  if (threadIdx.x < 128) {
    const int r = threadIdx.x >> 3, i = threadIdx.x & 7;
    constexpr int half = int4_block_warps / 2;
    const float gv = sum_parts(part_s, r, i, 0, half), uv = sum_parts(part_s, r, i, half, half);
    const std::int64_t row = row0 + r;
    if (i < m && row < inter) {
      const float gb = __bfloat162float(__float2bfloat16(gv)), ub = __bfloat162float(__float2bfloat16(uv));
      static_cast<bf16*>(y)[i * ldy + row] = __float2bfloat16(detail::silu(gb) * ub);
    }
  }
}

// v7's rows in RoPE pair order (int4_gemv_args::pair_rows) and, with rope,
// the RoPE-and-append epilogue. The first pr.rows rows of W are stored so
// that tile rows r and r + 8 (r < 8) are dims d = 8 j + r and d + head_dim /
// 2 of one head (kernels::cpu::int4_rope_pair_row): the writer of row r sums
// both over the warps (the order mma_write_rows sums in), rounds each to
// bf16 as the unfused GEMV stores them, and writes them to their natural
// rows; with rope it first rotates them as rope_append does (the shared
// detail::rope_rotate), q in y and k into the cache, k left unrotated in y
// as rope_append leaves it. Rows past pr.rows (v) are in natural order, and
// with rope also go to the cache.
struct tiled_pairs {
  std::int64_t rows = 0;
  int head_dim = 0;
  bool rope = false;
  rope_append_args r;  // with rope
};

__device__ __forceinline__ void pair_write_rows(int4_parts& part_s, const float (&acc)[4], int warp,
                                                int g, int t, std::int64_t row0, bf16* __restrict__ y,
                                                std::int64_t ldy, int m, std::int64_t n, const tiled_pairs& pr) {
  stash_parts(part_s, acc, warp, g, t);
  if (threadIdx.x >= 128) return;
  const int r = threadIdx.x >> 3, i = threadIdx.x & 7;
  const bool q_or_k = row0 < pr.rows;
  if (i >= m || (q_or_k && r >= 8)) return;  // rows r + 8 of a pair tile are written with row r
  const auto sum_row = [&](int rr) { return __float2bfloat16(sum_parts(part_s, rr, i)); };
  const rope_append_args& ra = pr.r;
  const int hd = pr.head_dim, half = hd / 2;
  bf16* yr = y + i * ldy;
  // This x row's token: its position, and its row in KV head 0's cache (add kh * capacity).
  std::int32_t pos = 0;
  std::int64_t cache_row = 0;
  if (pr.rope) {
    pos = ra.positions[i];
    const std::int64_t crow = ra.ring > 0 ? std::int64_t(pos) % ra.ring : std::int64_t(pos);
    cache_row = std::int64_t(ra.slots[i]) * ra.n_kv_heads * ra.capacity + crow;
  }
  if (!q_or_k) {  // v: natural order
    const std::int64_t row = row0 + r;
    if (row >= n) return;
    const bf16 v = sum_row(r);
    yr[row] = v;
    if (pr.rope) {
      const std::int64_t e = row - pr.rows, kh = e / hd;
      reinterpret_cast<bf16*>(ra.v_cache)[(cache_row + kh * ra.capacity) * hd + (e - kh * hd)] = v;
    }
    return;
  }
  const std::int64_t head = row0 / hd;
  const int d = int(row0 - head * hd) / 2 + r;  // 8 j + r, tile j of the head
  const std::int64_t nat = head * hd + d;
  const bf16 b0 = sum_row(r), b1 = sum_row(r + 8);
  if (!pr.rope || head >= ra.n_heads) {  // k (and q unrotated without rope) as computed
    yr[nat] = b0;
    yr[nat + half] = b1;
  }
  if (!pr.rope) return;
  bf16 r0, r1;
  detail::rope_rotate(__bfloat162float(b0), __bfloat162float(b1), pos, __ldg(ra.inv_freq + d), r0, r1);
  if (head < ra.n_heads) {
    yr[nat] = r0;
    yr[nat + half] = r1;
  } else {
    bf16* dst = reinterpret_cast<bf16*>(ra.k_cache) + (cache_row + (head - ra.n_heads) * ra.capacity) * hd;
    dst[d] = r0;
    dst[d + half] = r1;
  }
}

}  // namespace specpipe::kernels::cuda::detail
