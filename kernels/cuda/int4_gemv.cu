// The 4-bit weight GEMV of QuantSpec's draft (kernels/cuda/int4_gemv.hpp).
//
// At decode the product is bound by reading the codes once: n*k/2 bytes plus
// 4 bytes of scale and zero per 128 weights, a quarter of the bf16 GEMV's
// bytes. The layout is the CPU reference's (kernels/int4_linear.hpp; v7
// reads its tiled copy, kernels/int4_tiled.hpp, see below): a row's codes
// are contiguous, two per byte, so a lane's 16-byte load brings 32
// consecutive codes of one group (group is a multiple of 32). Nibbles become
// floats by the exponent trick (2^23 + q as bits, minus 2^23: two full-rate
// ops instead of a quarter-rate integer conversion), once per row and step,
// and are then used by all m inputs. x is read through the read-only cache;
// its 32 elements per lane are re-read by every warp (L1/L2 resident).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/norm_row.cuh"
#include "kernels/cuda/int4_gemv.hpp"
#include "kernels/cuda/int4_gemv_bulk.hpp"
#include "kernels/cuda/int4_gemv_writers.cuh"
#include "kernels/cuda/int4_products.cuh"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda {
namespace {

using detail::bf16;
using detail::mma_bf16;
using detail::offset_pair;
using detail::tiled_scale_products;
using detail::tiled_word_products;
using detail::word_of;
using detail::mma_write_rows;
using detail::pair_write_rows;
using detail::swiglu_write_rows;
using detail::tiled_pairs;

constexpr int int4_threads = 256;
constexpr int int4_warps = int4_threads / 32;
constexpr int int4_rows_per_warp = 2;
constexpr int int4_lane_codes = 32;                   // codes per 16-byte load
constexpr int int4_warp_cols = 32 * int4_lane_codes;  // columns one warp covers per load
constexpr int int4_unroll = 4;                        // loads per row in flight per lane

// Nibble e (0..7) of a 32-bit word as f32: 0x4B000000 is 2^23, so the bits
// 0x4B00000q are the float 2^23 + q exactly.
__device__ __forceinline__ float nibble_f32(unsigned word, int e) {
  return __uint_as_float(0x4B000000u | ((word >> (4 * e)) & 15u)) - 8388608.f;
}

template <int M, bool OutF32>
__global__ void __launch_bounds__(int4_threads)
    int4_gemv_kernel(const bf16* __restrict__ x, std::int64_t ldx, const std::uint8_t* __restrict__ codes,
                     std::int64_t code_stride, const unsigned short* __restrict__ scale,
                     const unsigned short* __restrict__ zero, std::int64_t group, std::int64_t groups,
                     void* __restrict__ y, std::int64_t ldy, bool accumulate, int m, std::int64_t n,
                     std::int64_t k) {
  constexpr int R = int4_rows_per_warp;
  detail::grid_dependency_wait();  // x (and y, accumulated) come from the kernels before
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const std::int64_t row0 = (std::int64_t(blockIdx.x) * int4_warps + warp) * R;
  if (row0 >= n) return;  // whole warps only: nothing below synchronizes the block

  std::int64_t rows[R];
  const std::uint8_t* cr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    rows[r] = row0 + r < n ? row0 + r : n - 1;  // in bounds; the extra row is computed and dropped
    cr[r] = codes + rows[r] * code_stride;
  }

  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = 0.f;

  for (std::int64_t base = 0; base < k; base += std::int64_t(int4_unroll) * int4_warp_cols) {
    uint4 cw[int4_unroll][R];
#pragma unroll
    for (int u = 0; u < int4_unroll; ++u) {
      const std::int64_t c = base + u * int4_warp_cols + lane * int4_lane_codes;
#pragma unroll
      for (int r = 0; r < R; ++r)
        cw[u][r] = c < k ? __ldcs(reinterpret_cast<const uint4*>(cr[r] + c / 2)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < int4_unroll; ++u) {
      const std::int64_t c = base + u * int4_warp_cols + lane * int4_lane_codes;
      if (c >= k) break;
      const std::int64_t g = c / group;
      float s[R], z[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        s[r] = __half2float(__ushort_as_half(__ldg(scale + rows[r] * groups + g)));
        z[r] = __half2float(__ushort_as_half(__ldg(zero + rows[r] * groups + g)));
      }
      float sq[R][M], sx[M];
#pragma unroll
      for (int i = 0; i < M; ++i) {
        sx[i] = 0.f;
#pragma unroll
        for (int r = 0; r < R; ++r) sq[r][i] = 0.f;
      }
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        float q[R][8];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const unsigned word = word_of(cw[u][r], w);
#pragma unroll
          for (int e = 0; e < 8; ++e) q[r][e] = nibble_f32(word, e);
        }
#pragma unroll
        for (int i = 0; i < M; ++i) {
          if (i >= m) break;
          float xf[8];
          detail::bf16x8_to_f32(__ldg(reinterpret_cast<const uint4*>(x + i * ldx + c + 8 * w)), xf);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            sx[i] += xf[e];
#pragma unroll
            for (int r = 0; r < R; ++r) sq[r][i] = fmaf(xf[e], q[r][e], sq[r][i]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int i = 0; i < M; ++i) acc[r][i] += z[r] * sx[i] + s[r] * sq[r][i];
    }
  }

#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const float v = detail::warp_sum(acc[r][i]);
      if (lane == 0 && i < m && row0 + r < n) {
        if constexpr (OutF32) {
          float* yp = static_cast<float*>(y) + i * ldy + row0 + r;
          *yp = accumulate ? *yp + v : v;
        } else {
          static_cast<bf16*>(y)[i * ldy + row0 + r] = __float2bfloat16(v);
        }
      }
    }
}

// ---- v2: the tensor-core GEMV (group and k multiples of 128) -------------
//
// v1 above spends about 10 instructions per weight (nibble to f32, one FMA
// per input row, the x sums) and ran at ~0.6-1.3 TB/s on the H200/H100: a
// compute-bound kernel, so the draft's projections took longer than their
// bytes. v2 hands the products to mma.m16n8k16 (bf16 in, f32 accumulate):
//  * A = the codes of 16 weight rows as bf16 128 + q: (w >> 4i) & 0x000F000F
//    | 0x43004300 puts two nibbles into a bf16x2 whose values are exactly
//    128 + q (bf16 holds integers to 256), one shift and one lop3 per pair;
//  * B = up to 8 rows of x, bf16 as stored (no conversion);
//  * the k order inside an MMA is free as long as A and B agree: lane (g, t)
//    owns the 32 consecutive columns 32t .. 32t + 31 of each 128-column chunk
//    in rows g and g + 8 (two 16-byte loads) and feeds them as pairs (c, c+4)
//    of each 8-column word; x gets the same pairing with byte permutes;
//  * a second MMA with A = ones gives each chunk's sum of x, so that
//    sum x (z + s q) = s T + (z - 128 s) sum x, with T the offset product.
// Products of bf16 are exact in f32 and the offset's 128 sum x is removed in
// f32 (its rounding is ~2^-24 * 128 * sum |x|, far below bf16 outputs).
// A block = 16 rows x 8 warps, the warps taking interleaved chunks of k (four
// per iteration, 4 KB of codes in flight per warp), merged in shared memory.
constexpr int mma_warps = detail::int4_block_warps;
constexpr int mma_chunk = detail::int4_chunk;  // columns per chunk: 4 lanes x 32
// Chunks whose codes one warp loads per iteration (U) and the blocks per SM
// the registers must allow (MINB): v2 = (4, 1), v3 = (2, 3). The first cut,
// (2 with x prefetched, 1), ran at 18-27% of DRAM bandwidth on llama2-7b
// shapes (ncu, H200) with 2 blocks per SM; (4, 3) spilled.

// One 8-column word of rows g (a) and g + 8 (b) against the same 8 columns
// of x (xw, 8 bf16 in column order): the offset product T into tt and the
// sum of x into sx, on the tensor cores.
__device__ __forceinline__ void word_products(float (&tt)[4], float (&sx)[4], unsigned a, unsigned b,
                                              const uint4& xw) {
  constexpr unsigned ones = 0x3F803F80u;  // bf16x2 (1, 1)
  // Two bf16 per x word, paired (c, c + 4) to match offset_pair: low halves
  // of (x.x, x.z) = columns 0, 4; ...
  const unsigned x0 = __byte_perm(xw.x, xw.z, 0x5410), x1 = __byte_perm(xw.x, xw.z, 0x7632);
  const unsigned x2 = __byte_perm(xw.y, xw.w, 0x5410), x3 = __byte_perm(xw.y, xw.w, 0x7632);
  mma_bf16(tt, offset_pair(a, 0), offset_pair(b, 0), offset_pair(a, 1), offset_pair(b, 1), x0, x1);
  mma_bf16(tt, offset_pair(a, 2), offset_pair(b, 2), offset_pair(a, 3), offset_pair(b, 3), x2, x3);
  mma_bf16(sx, ones, ones, ones, ones, x0, x1);
  mma_bf16(sx, ones, ones, ones, ones, x2, x3);
}

// acc += s T + (z - 128 s) sum x with the f16 scale and zero of row g
// (sa, za) and row g + 8 (sb, zb): C rows g and g + 8, columns 2t and
// 2t + 1 (x rows).
__device__ __forceinline__ void scale_products(float (&acc)[4], const float (&tt)[4], const float (&sx)[4],
                                               unsigned short sa_raw, unsigned short za_raw, unsigned short sb_raw,
                                               unsigned short zb_raw) {
  const float sa = __half2float(__ushort_as_half(sa_raw)), za = __half2float(__ushort_as_half(za_raw));
  const float sb = __half2float(__ushort_as_half(sb_raw)), zb = __half2float(__ushort_as_half(zb_raw));
  acc[0] += sa * tt[0] + (za - 128.f * sa) * sx[0];
  acc[1] += sa * tt[1] + (za - 128.f * sa) * sx[1];
  acc[2] += sb * tt[2] + (zb - 128.f * sb) * sx[2];
  acc[3] += sb * tt[3] + (zb - 128.f * sb) * sx[3];
}

// One 128-column chunk of rows g and g + 8 (codes wa, wb; scale and zero of
// each in s_raw) against the lane's x columns at xc: the offset product T and
// the chunk's sum of x on the tensor cores, then acc += s T + (z - 128 s) sum x.
__device__ __forceinline__ void accumulate_chunk(float (&acc)[4], const uint4& wa, const uint4& wb,
                                          const unsigned short (&s_raw)[4], const bf16* xc, bool has_x) {
  float tt[4] = {0.f, 0.f, 0.f, 0.f}, sx[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // Columns 8i .. 8i + 7 of the lane's 32.
    const uint4 xw = has_x ? __ldg(reinterpret_cast<const uint4*>(xc + 8 * i)) : make_uint4(0, 0, 0, 0);
    word_products(tt, sx, word_of(wa, i), word_of(wb, i), xw);
  }
  scale_products(acc, tt, sx, s_raw[0], s_raw[1], s_raw[2], s_raw[3]);
}

// The warp's chunks warp, warp + mma_warps, ... taken U at a time into a
// Stage by load(c0, stage): the first U before the grid dependency wait
// (weights are constants of the model: they stream in while the kernel that
// writes x drains), later ones at the top of their iteration; body(stage, u,
// chunk) for each. (Loading the next iteration's chunks before computing the
// current ones, two stages in registers, cost occupancy and measured 25%
// slower in v2.) v2 and v3 use it; v7 steps its own pointers.
template <int U, class Stage, class Load, class Body>
__device__ __forceinline__ void for_warp_chunks(int warp, std::int64_t chunks, Load&& load, Body&& body) {
  std::int64_t c0 = warp;
  Stage cur;
  if (c0 < chunks) load(c0, cur);
  detail::grid_dependency_wait();  // x (and y, accumulated) come from the kernels before
  for (; c0 < chunks; c0 += std::int64_t(U) * mma_warps) {
    if (c0 != warp) load(c0, cur);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::int64_t ch = c0 + std::int64_t(u) * mma_warps;
      if (ch >= chunks) break;
      body(cur, u, ch);
    }
  }
}

template <bool OutF32, int U, int MINB>
__global__ void __launch_bounds__(32 * mma_warps, MINB)
    int4_gemv_mma_kernel(const bf16* __restrict__ x, std::int64_t ldx, const std::uint8_t* __restrict__ codes,
                         std::int64_t code_stride, const unsigned short* __restrict__ scale,
                         const unsigned short* __restrict__ zero, std::int64_t group, std::int64_t groups,
                         void* __restrict__ y, std::int64_t ldy, bool accumulate, int m, std::int64_t n,
                         std::int64_t k) {
  __shared__ float part_s[mma_warps][16][8];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const std::int64_t row0 = std::int64_t(blockIdx.x) * 16;
  const std::int64_t ra = min(row0 + g, n - 1), rb = min(row0 + g + 8, n - 1);
  const std::uint8_t* ca = codes + ra * code_stride;
  const std::uint8_t* cb = codes + rb * code_stride;
  const bool has_x = g < m;
  const bf16* xr = x + std::int64_t(has_x ? g : 0) * ldx;
  const std::int64_t chunks = k / mma_chunk;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};

  // The codes, scales and zeros of U chunks starting at c0 (4 KB per warp at
  // U = 4); x is read per word below, from L1 (every warp of the SM reads
  // the same x).
  struct stage {
    uint4 wa[U], wb[U];
    unsigned short s_raw[U][4];
  };
  auto load = [&](std::int64_t c0, stage& st) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::int64_t ch = min(c0 + std::int64_t(u) * mma_warps, chunks - 1);
      const std::int64_t col = ch * mma_chunk + 32 * t;
      st.wa[u] = __ldcs(reinterpret_cast<const uint4*>(ca + col / 2));
      st.wb[u] = __ldcs(reinterpret_cast<const uint4*>(cb + col / 2));
      const std::int64_t gi = ch * mma_chunk / group;
      st.s_raw[u][0] = __ldg(scale + ra * groups + gi);
      st.s_raw[u][1] = __ldg(zero + ra * groups + gi);
      st.s_raw[u][2] = __ldg(scale + rb * groups + gi);
      st.s_raw[u][3] = __ldg(zero + rb * groups + gi);
    }
  };
  for_warp_chunks<U, stage>(warp, chunks, load, [&](const stage& cur, int u, std::int64_t ch) {
    accumulate_chunk(acc, cur.wa[u], cur.wb[u], cur.s_raw[u], xr + ch * mma_chunk + 32 * t, has_x);
  });
  mma_write_rows<OutF32>(part_s, acc, warp, g, t, row0, y, ldy, accumulate, m, n);
}
// v4: the same products with the codes staged through shared memory by
// cp.async, S chunks deep per warp. Each lane copies exactly the 32 bytes it
// later reads, so no barrier or shuffle is needed, and the chunks in flight
// cost shared memory instead of registers (v2's loads sit in registers until
// used, which capped its resident warps; its second register stage cost
// more). The scales and zeros of a chunk are loaded when its copy is issued.
constexpr int staged_depth = 4;

template <bool OutF32, int S>
__global__ void __launch_bounds__(32 * mma_warps)
    int4_gemv_staged_kernel(const bf16* __restrict__ x, std::int64_t ldx, const std::uint8_t* __restrict__ codes,
                            std::int64_t code_stride, const unsigned short* __restrict__ scale,
                            const unsigned short* __restrict__ zero, std::int64_t group, std::int64_t groups,
                            void* __restrict__ y, std::int64_t ldy, bool accumulate, int m, std::int64_t n,
                            std::int64_t k) {
  __shared__ __align__(16) uint4 stage_s[mma_warps][S][2][32];
  __shared__ float part_s[mma_warps][16][8];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const std::int64_t row0 = std::int64_t(blockIdx.x) * 16;
  const std::int64_t ra = min(row0 + g, n - 1), rb = min(row0 + g + 8, n - 1);
  const std::uint8_t* ca = codes + ra * code_stride;
  const std::uint8_t* cb = codes + rb * code_stride;
  const bool has_x = g < m;
  const bf16* xr = x + std::int64_t(has_x ? g : 0) * ldx;
  const std::int64_t chunks = k / mma_chunk;
  const std::int64_t mine = chunks > warp ? (chunks - warp + mma_warps - 1) / mma_warps : 0;  // this warp's
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  unsigned short sr[S][4];

  // The warp's i-th chunk (chunk warp + 8 i) into stage st; one commit group
  // per call, empty past the warp's chunks, so that wait<S - 1> always
  // leaves exactly the S - 1 later chunks in flight.
  auto issue = [&](std::int64_t i, int st) {
    if (i < mine) {
      const std::int64_t ch = warp + i * mma_warps;
      const std::int64_t col = ch * mma_chunk + 32 * t;
      detail::cp_async16(&stage_s[warp][st][0][lane], ca + col / 2);
      detail::cp_async16(&stage_s[warp][st][1][lane], cb + col / 2);
      const std::int64_t gi = ch * mma_chunk / group;
      sr[st][0] = __ldg(scale + ra * groups + gi);
      sr[st][1] = __ldg(zero + ra * groups + gi);
      sr[st][2] = __ldg(scale + rb * groups + gi);
      sr[st][3] = __ldg(zero + rb * groups + gi);
    }
    detail::cp_async_commit();
  };
  // Weights only before the wait (a dependent launch starts while the
  // kernel that writes x drains).
#pragma unroll
  for (int st = 0; st < S - 1; ++st) issue(st, st);
  detail::grid_dependency_wait();  // x (and y, accumulated) come from the kernels before
  for (std::int64_t base = 0; base < mine; base += S) {
#pragma unroll
    for (int st = 0; st < S; ++st) {
      const std::int64_t i = base + st;
      issue(i + S - 1, (st + S - 1) % S);
      detail::cp_async_wait<S - 1>();
      if (i < mine) {
        const std::int64_t ch = warp + i * mma_warps;
        accumulate_chunk(acc, stage_s[warp][st][0][lane], stage_s[warp][st][1][lane], sr[st],
                  xr + ch * mma_chunk + 32 * t, has_x);
      }
    }
  }
  detail::cp_async_wait<0>();
  mma_write_rows<OutF32>(part_s, acc, warp, g, t, row0, y, ldy, accumulate, m, n);
}

// v7: v2's products over the tiled layout (kernels/int4_tiled.hpp). In the
// row layout each warp load touches 16 rows code_stride bytes apart, 64
// bytes of each, and neither fewer instructions (v5) nor longer streams (v6)
// lifted v2-v4 past 1.6 TB/s (NOTES.md). Here block b (tile b, 16 rows) reads
// the contiguous band of its tile's chunks; warp w takes chunks w, w + 8,
// ... as v2 does (U in flight, loaded before the PDL wait the first time),
// each chunk as two contiguous 512-byte loads (lane L's 16 bytes at 16 L,
// rows g, then rows g + 8 after 512 bytes), and its scales as one 8-byte
// load per lane (sa, za, sb, zb) instead of four 2-byte ones from four
// rows. Lane (g, t)'s word i of a chunk holds columns 32 i + 8 t .. + 7, so
// its x is one 16-byte load per word at that column and each MMA's k values
// lie in one 32-column slice. The word's nibbles are ordered so that pair p
// (nibbles p, p + 4) is columns 2p and 2p + 1, x's p-th bf16x2 register as
// loaded: no byte permutes (v2 needs four per word).
//
// The kernel is bound by its instructions (NOTES.md, "Stop 20": ~210 warp
// instructions per 1 KB chunk, half the issue slots busy), so it is written
// for few of them: 32-bit chunk indices, one 64-bit address per load, no
// predicate on x (rows of x past m read row m - 1: their products land in
// columns of D that mma_write_rows drops), one FFMA pair per output, and
// the scale index without a division for the default group of one chunk.
// Scales: tiled_scales::chunk (group = 128), chunks (group a multiple of
// 128: chunk / group_units), words (k or group not multiples of 128: every
// word scaled with its own group's scale, the last chunk's words past k,
// zero codes, skipped). Padding rows (n not a multiple of 16) have zero
// codes and scales, are computed and dropped by mma_write_rows. The merge
// over warps and the writes are v2's.
enum class tiled_scales { chunk, chunks, words };
// int4_gemv_args::norm as the kernel takes it.
struct tiled_norm {
  const float* x = nullptr;
  std::int64_t ld = 0;
  const float* weight = nullptr;
  float eps = 0.f;
};
// Chunks in flight per warp, and the blocks per SM the registers must allow:
// (2, 3) at ~70 registers beat (4, 2) at ~90 in the draft (NOTES.md, "Stop
// 34": more, shorter blocks hide the grids' few waves better; 2 KB a warp
// in flight is still enough).
constexpr int tiled_unroll = 2;
constexpr int tiled_min_blocks = 3;

// group_units: group / 128 (chunks) or group / 32 (words); chunk and word
// indices fit in 32 bits (k < 2^31).
template <bool OutF32, bool Swiglu, bool Norm, bool Pairs, tiled_scales S, int U, int MINB>
__global__ void __launch_bounds__(32 * mma_warps, MINB)
    int4_gemv_tiled_kernel(const bf16* __restrict__ x, std::int64_t ldx, const uint4* __restrict__ codes,
                           const uint2* __restrict__ scale_zero, std::int64_t groups, unsigned group_units,
                           void* __restrict__ y, std::int64_t ldy, bool accumulate, int m,
                           std::int64_t n, std::int64_t k, tiled_norm nrm, tiled_pairs pr) {
  __shared__ float part_s[mma_warps][16][8];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const std::int64_t row0 = std::int64_t(blockIdx.x) * 16;
  // SwiGLU: block b takes gate tile b with warps 0-3 and up tile b + n / 32
  // (row n / 2 + 16 b on) with warps 4-7; else one tile, all 8 warps.
  constexpr int W = Swiglu ? mma_warps / 2 : mma_warps;  // warps per tile
  const int hw = Swiglu ? warp % W : warp;               // the warp's place among them
  const std::int64_t tile = Swiglu ? blockIdx.x + (warp / W) * (n / 32) : blockIdx.x;
  const int chunks = int((k + mma_chunk - 1) / mma_chunk), words = int(k / 32);
  // The warp's chunks hw, hw + W, ...: chunk ch of the tile is cp[64 ch]
  // (rows g) and cp[64 ch + 32] (rows g + 8), group gi's scales and zeros
  // szt[8 gi]. The pointers below start at the warp's first chunk and move
  // by one iteration (U chunks of this warp) at a time, so every load of an
  // iteration is one base register plus an immediate (indices clamped per
  // chunk cost ~20 address instructions a chunk, a fifth of its products).
  constexpr int iter = U * W;  // chunks per iteration of the tile's warps
  const uint4* cp = codes + (tile * chunks + hw) * 64 + lane;
  const uint2* szt = scale_zero + tile * groups * 8 + g;
  const uint2* sp = szt + 8 * hw;  // chunk: one group per chunk
  // Norm: x is the block's own RMSNorm of nrm.x's rows, in shared memory
  // (xs, m rows of k), formed after the grid dependency wait below.
  extern __shared__ uint4 xs_dyn[];
  bf16* xs = reinterpret_cast<bf16*>(xs_dyn);
  if constexpr (Norm) {
    x = xs;
    ldx = k;
  }
  const bf16* xp = x + std::int64_t(min(g, m - 1)) * ldx + 8 * t + std::int64_t(hw) * mma_chunk;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};

  uint4 wa[U], wb[U];
  uint2 sz[U];  // chunk and chunks only
  auto load = [&](int c0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ch = c0 + u * W;
      if (ch >= chunks) break;
      wa[u] = __ldcs(cp + 64 * W * u);
      wb[u] = __ldcs(cp + 64 * W * u + 32);
      if constexpr (S == tiled_scales::chunk) sz[u] = __ldg(sp + 8 * W * u);
      if constexpr (S == tiled_scales::chunks) sz[u] = __ldg(szt + 8 * (unsigned(ch) / group_units));
    }
  };
  int c0 = hw;
  if (c0 < chunks) load(c0);
  // What follows this GEMV (a norm, RoPE, SwiGLU, the next GEMV) may launch
  // now and wait in its own grid dependency wait for this grid to finish.
  detail::allow_dependent_launch();
  detail::grid_dependency_wait();  // x (and y, accumulated) come from the kernels before
  if constexpr (Norm) {
    // norm_row.cuh's order, the RMSNorm kernel's bits: every block of the
    // GEMV forms the same xn (16 KB of f32 from L2 a row at hidden 4096)
    // while its first codes are in flight.
    __shared__ float norm_part[detail::norm_row_threads / 32];
    const int n4 = int(k / 4);
    const float4* w4 = reinterpret_cast<const float4*>(nrm.weight);
    for (int r = 0; r < m; ++r) {
      const float4* xr = reinterpret_cast<const float4*>(nrm.x + r * nrm.ld);
      float ss = 0.f;
#pragma unroll 4
      for (int c = threadIdx.x; c < n4; c += detail::norm_row_threads) ss = detail::sum_squares4(ss, xr[c]);
      const float inv = detail::norm_inverse(detail::norm_block_sum(ss, norm_part), int(k), nrm.eps);
      uint2* xo = reinterpret_cast<uint2*>(xs + std::int64_t(r) * k);
#pragma unroll 4
      for (int c = threadIdx.x; c < n4; c += detail::norm_row_threads)
        xo[c] = detail::norm_scale4(xr[c], inv, __ldg(w4 + c));
      __syncthreads();  // xs complete; norm_part free for the next row
    }
  }
  for (; c0 < chunks; c0 += iter, cp += 64 * iter, sp += 8 * iter, xp += std::int64_t(iter) * mma_chunk) {
    if (c0 != hw) load(c0);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ch = c0 + u * W;
      if (ch >= chunks) break;
      const bf16* xc = xp + u * W * mma_chunk;
      if constexpr (S != tiled_scales::words) {
        uint4 xw[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if constexpr (Norm) xw[i] = *reinterpret_cast<const uint4*>(xc + 32 * i);
          else xw[i] = __ldg(reinterpret_cast<const uint4*>(xc + 32 * i));
        }
        float tt[4] = {0.f, 0.f, 0.f, 0.f}, sx[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int i = 0; i < 4; ++i) tiled_word_products(tt, sx, word_of(wa[u], i), word_of(wb[u], i), xw[i]);
        tiled_scale_products(acc, tt, sx, sz[u]);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int word = 4 * ch + i;
          if (word >= words) break;  // past k: zero codes, and x is not read past its row
          float tt[4] = {0.f, 0.f, 0.f, 0.f}, sx[4] = {0.f, 0.f, 0.f, 0.f};
          tiled_word_products(tt, sx, word_of(wa[u], i), word_of(wb[u], i),
                              __ldg(reinterpret_cast<const uint4*>(xc + 32 * i)));
          tiled_scale_products(acc, tt, sx, __ldg(szt + 8 * (unsigned(word) / group_units)));
        }
      }
    }
  }
  if constexpr (Swiglu)
    swiglu_write_rows(part_s, acc, warp, g, t, row0, y, ldy, m, n / 2);
  else if constexpr (Pairs)
    pair_write_rows(part_s, acc, warp, g, t, row0, static_cast<bf16*>(y), ldy, m, n, pr);
  else
    mma_write_rows<OutF32>(part_s, acc, warp, g, t, row0, y, ldy, accumulate, m, n);
}

template <bool OutF32>
void launch_staged(const int4_gemv_args& a, cudaStream_t s) {
  const dim3 grid(unsigned((a.n + 15) / 16));
  const std::int64_t groups = (a.k + a.group - 1) / a.group;
  detail::launch_kernel(
      int4_gemv_staged_kernel<OutF32, staged_depth>, grid, dim3(32 * mma_warps), 0, s, a.dependent,
      reinterpret_cast<const bf16*>(a.x), a.ldx, a.codes, a.code_stride,
      reinterpret_cast<const unsigned short*>(a.scale), reinterpret_cast<const unsigned short*>(a.zero), a.group,
      groups, a.y, a.ldy, a.accumulate, int(a.m), a.n, a.k);
  CUDA_CHECK_LAUNCH();
}

template <bool OutF32, int U, int MINB>
void launch_mma(const int4_gemv_args& a, cudaStream_t s) {
  const dim3 grid(unsigned((a.n + 15) / 16));
  const std::int64_t groups = (a.k + a.group - 1) / a.group;
  detail::launch_kernel(
      int4_gemv_mma_kernel<OutF32, U, MINB>, grid, dim3(32 * mma_warps), 0, s, a.dependent,
      reinterpret_cast<const bf16*>(a.x), a.ldx, a.codes, a.code_stride,
      reinterpret_cast<const unsigned short*>(a.scale), reinterpret_cast<const unsigned short*>(a.zero), a.group,
      groups, a.y, a.ldy, a.accumulate, int(a.m), a.n, a.k);
  CUDA_CHECK_LAUNCH();
}

// Shared memory of the normalizing kernel: m rows of k bf16 (64 KB at m = 8
// and k = 4096, past the 48 KB a launch gets unasked), allowed once per
// instantiation and device.
// (A template on the kernel itself: its statics are then per instantiation;
// on the kernel's type they were shared by every instantiation alike.)
template <auto Kernel>
void allow_norm_smem() {
  static std::mutex mu;
  static bool done[16] = {};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (dev >= 0 && dev < 16 && done[dev]) return;
  CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(int4_gemv_max_rows * int4_gemv_max_norm_k * 2)));
  if (dev >= 0 && dev < 16) done[dev] = true;
}

template <bool OutF32, bool Swiglu, bool Norm, bool Pairs, tiled_scales S>
void launch_tiled(const int4_gemv_args& a, cudaStream_t s) {
  const dim3 grid(unsigned(Swiglu ? a.n / 32 : (a.n + 15) / 16));
  const std::int64_t groups = (a.k + a.group - 1) / a.group;
  constexpr auto kernel = int4_gemv_tiled_kernel<OutF32, Swiglu, Norm, Pairs, S, tiled_unroll, tiled_min_blocks>;
  tiled_pairs pr;
  if constexpr (Pairs) {
    pr.rows = a.pair_rows;
    pr.head_dim = a.pair_head_dim;
    pr.rope = a.rope != nullptr;
    if (a.rope) pr.r = *a.rope;
  }
  std::size_t smem = 0;
  tiled_norm nrm;
  if constexpr (Norm) {
    allow_norm_smem<kernel>();
    smem = std::size_t(a.m * a.k * 2);
    nrm = {a.norm.x, a.norm.ld, a.norm.weight, a.norm.eps};
  }
  detail::launch_kernel(kernel, grid, dim3(32 * mma_warps), smem, s, a.dependent, reinterpret_cast<const bf16*>(a.x),
                        a.ldx, reinterpret_cast<const uint4*>(a.codes), reinterpret_cast<const uint2*>(a.scale_zero),
                        groups, unsigned(a.group / (S == tiled_scales::words ? 32 : mma_chunk)), a.y, a.ldy,
                        a.accumulate, int(a.m), a.n, a.k, nrm, pr);
  CUDA_CHECK_LAUNCH();
}

template <bool OutF32, bool Swiglu, bool Pairs = false>
void launch_tiled_scales(const int4_gemv_args& a, cudaStream_t s) {
  if (a.norm.weight) {  // whole chunks only (int4_gemv checks)
    if (a.group == mma_chunk) launch_tiled<OutF32, Swiglu, true, Pairs, tiled_scales::chunk>(a, s);
    else launch_tiled<OutF32, Swiglu, true, Pairs, tiled_scales::chunks>(a, s);
  } else if (a.k % mma_chunk != 0 || a.group % mma_chunk != 0) {
    launch_tiled<OutF32, Swiglu, false, Pairs, tiled_scales::words>(a, s);
  } else if (a.group == mma_chunk) {
    launch_tiled<OutF32, Swiglu, false, Pairs, tiled_scales::chunk>(a, s);
  } else {
    launch_tiled<OutF32, Swiglu, false, Pairs, tiled_scales::chunks>(a, s);
  }
}

template <int M, bool OutF32>
void launch(const int4_gemv_args& a, cudaStream_t s) {
  const std::int64_t rows_per_block = std::int64_t(int4_warps) * int4_rows_per_warp;
  const dim3 grid(unsigned((a.n + rows_per_block - 1) / rows_per_block));
  const std::int64_t groups = (a.k + a.group - 1) / a.group;
  detail::launch_kernel(
      int4_gemv_kernel<M, OutF32>, grid, dim3(int4_threads), 0, s, a.dependent,
      reinterpret_cast<const bf16*>(a.x), a.ldx, a.codes, a.code_stride,
      reinterpret_cast<const unsigned short*>(a.scale), reinterpret_cast<const unsigned short*>(a.zero), a.group,
      groups, a.y, a.ldy, a.accumulate, int(a.m), a.n, a.k);
  CUDA_CHECK_LAUNCH();
}

template <bool OutF32>
void launch_m(const int4_gemv_args& a, cudaStream_t s) {
  // M is the register-tile height: 1, 2, 4 or 8 rows of x (m rounded up).
  if (a.m <= 1) launch<1, OutF32>(a, s);
  else if (a.m <= 2) launch<2, OutF32>(a, s);
  else if (a.m <= 4) launch<4, OutF32>(a, s);
  else launch<8, OutF32>(a, s);
}

}  // namespace

bool int4_gemv_supported(const int4_gemv_args& a) {
  const auto aligned = [](const void* p, std::uintptr_t n) { return reinterpret_cast<std::uintptr_t>(p) % n == 0; };
  const bool common = a.m >= 1 && a.m <= int4_gemv_max_rows && a.k > 0 && a.k % 32 == 0 && a.group > 0 &&
                      a.group % 32 == 0 && a.ldx % 8 == 0 && aligned(a.x, 16) && aligned(a.codes, 16);
  if (int4_gemv_layout(a.version) == int4_layout::tiles)
    return common && a.k <= INT_MAX && aligned(a.scale_zero, 8);  // the kernel's word index is 32-bit
  return common && a.code_stride % 16 == 0 && a.code_stride >= a.k / 2;
}

namespace {

// int4_gemv_args::pair_rows and rope, as int4_gemv.hpp states them.
void check_pairs(const int4_gemv_args& a, bool tiles) {
  if (a.pair_rows == 0 && !a.rope) return;
  const std::string got = " got pair_rows=" + std::to_string(a.pair_rows) + " pair_head_dim=" +
                          std::to_string(a.pair_head_dim) + " n=" + std::to_string(a.n);
  if (a.pair_rows < 0 || a.pair_head_dim <= 0 || a.pair_head_dim % 16 != 0 || a.pair_rows % a.pair_head_dim != 0 ||
      a.pair_rows > a.n || !tiles || a.out != gemm_out::bf16 || a.accumulate)
    throw std::invalid_argument("int4_gemv: rows in RoPE pair order (pair_rows) need the tiled layout, a bf16 output "
                                "and whole heads of a pair_head_dim that is a positive multiple of 16;" + got);
  if (!a.rope) return;
  const rope_append_args& r = *a.rope;
  if (r.head_dim != a.pair_head_dim || r.n_heads <= 0 || r.n_kv_heads <= 0 ||
      a.pair_rows != std::int64_t(r.n_heads + r.n_kv_heads) * r.head_dim ||
      a.n != std::int64_t(r.n_heads + 2 * r.n_kv_heads) * r.head_dim || !r.k_cache || !r.v_cache || !r.slots ||
      !r.positions || !r.inv_freq || r.capacity <= 0 || r.ring < 0)
    throw std::invalid_argument(
        "int4_gemv: the RoPE epilogue (rope) needs a qkv weight, n = (n_heads + 2 n_kv_heads) head_dim with its q "
        "and k rows in pair order (pair_rows = (n_heads + n_kv_heads) head_dim, pair_head_dim = head_dim), and the "
        "cache, slots, positions and inv_freq;" + got + " n_heads=" + std::to_string(r.n_heads) + " n_kv_heads=" +
        std::to_string(r.n_kv_heads) + " head_dim=" + std::to_string(r.head_dim));
}

}  // namespace

void int4_gemv(const int4_gemv_args& a, stream_t s) {
  if (a.version < 1 || (a.version > 4 && a.version != 7 && a.version != 9))
    throw std::invalid_argument("int4_gemv: version must be 1, 2, 3, 4, 7 or 9, got " + std::to_string(a.version));
  const bool tiles = int4_gemv_layout(a.version) == int4_layout::tiles;
  if (a.n <= 0 || a.k <= 0 || a.m < 0 || a.ldx < a.k || a.ldy < (a.out == gemm_out::swiglu ? a.n / 2 : a.n) || (!tiles && (!a.scale || !a.zero)) ||
      !a.codes || !a.y)
    throw std::invalid_argument("int4_gemv: bad shape or missing pointers: m=" + std::to_string(a.m) + " n=" +
                                std::to_string(a.n) + " k=" + std::to_string(a.k) + " ldx=" + std::to_string(a.ldx) +
                                " ldy=" + std::to_string(a.ldy));
  // The layouts cannot be told apart by their bytes: the pointers say which one the caller holds.
  if (tiles && (!a.scale_zero || a.scale || a.zero))
    throw std::invalid_argument("int4_gemv: versions 7 and 9 read the tiled layout (kernels/int4_tiled.hpp): it needs "
                                "scale_zero and takes no row-layout scale or zero");
  if (!tiles && a.scale_zero)
    throw std::invalid_argument("int4_gemv: version " + std::to_string(a.version) +
                                " reads the row layout; scale_zero is the tiled layout's (versions 7 and 9)");
  if (a.accumulate && a.out != gemm_out::f32) throw std::invalid_argument("int4_gemv: accumulate needs an f32 output");
  if (a.norm.weight &&
      (!tiles || a.version == 9 || !a.norm.x || a.k % mma_chunk != 0 || a.group % mma_chunk != 0 ||
       a.k > int4_gemv_max_norm_k || a.norm.ld < a.k || a.norm.ld % 4 != 0 ||
       reinterpret_cast<std::uintptr_t>(a.norm.x) % 16 != 0 || reinterpret_cast<std::uintptr_t>(a.norm.weight) % 16 != 0))
    throw std::invalid_argument("int4_gemv: the RMSNorm of the input (norm) needs version 7, k and group multiples of "
                                "128, k <= " + std::to_string(int4_gemv_max_norm_k) +
                                ", and 16-byte aligned f32 rows (ld a multiple of 4, >= k) and weight; got version " +
                                std::to_string(a.version) + " k=" + std::to_string(a.k) + " group=" +
                                std::to_string(a.group) + " ld=" + std::to_string(a.norm.ld));
  if (a.out == gemm_out::swiglu && (!tiles || a.version == 9 || a.n % 32 != 0 || a.ldy < a.n / 2))
    throw std::invalid_argument("int4_gemv: the SwiGLU output needs version 7 (the tiled layout) and n = 2 x inter "
                                "with inter a multiple of 16 and ldy >= inter; got version " +
                                std::to_string(a.version) + " n=" + std::to_string(a.n) + " ldy=" +
                                std::to_string(a.ldy));
  check_pairs(a, tiles);
  if (a.m == 0) return;
  if (tiles && !int4_gemv_supported(a))
    throw std::invalid_argument("int4_gemv: the tiled versions need 1 <= m <= 8, k and group multiples of 32, k < 2^31, "
                                "ldx a multiple of 8, 16-byte aligned x and codes and 8-byte aligned scale_zero; got "
                                "m=" + std::to_string(a.m) + " k=" + std::to_string(a.k) + " group=" +
                                std::to_string(a.group) + " ldx=" + std::to_string(a.ldx));
  if (!int4_gemv_supported(a))
    throw std::invalid_argument("int4_gemv: needs 1 <= m <= 8, k and group multiples of 32, code_stride a multiple "
                                "of 16 holding k/2 bytes, ldx a multiple of 8 and 16-byte aligned x and codes; got m=" +
                                std::to_string(a.m) + " k=" + std::to_string(a.k) + " group=" +
                                std::to_string(a.group) + " code_stride=" + std::to_string(a.code_stride) +
                                " ldx=" + std::to_string(a.ldx));
  if (tiles) {
    if (a.pair_rows > 0) {  // v7 only: v9 has no pair order, so it runs v7 here
      launch_tiled_scales<false, false, true>(a, as_stream(s));
      return;
    }
    if (a.version == 9 && detail::int4_gemv_bulk(a, as_stream(s))) return;
    if (a.out == gemm_out::f32) launch_tiled_scales<true, false>(a, as_stream(s));
    else if (a.out == gemm_out::swiglu) launch_tiled_scales<false, true>(a, as_stream(s));
    else launch_tiled_scales<false, false>(a, as_stream(s));
    return;
  }
  if (a.version != 1 && a.k % mma_chunk == 0 && a.group % mma_chunk == 0) {
    const bool f32 = a.out == gemm_out::f32;
    if (a.version == 4) {
      if (f32) launch_staged<true>(a, as_stream(s));
      else launch_staged<false>(a, as_stream(s));
    } else if (a.version == 3) {
      if (f32) launch_mma<true, 2, 3>(a, as_stream(s));
      else launch_mma<false, 2, 3>(a, as_stream(s));
    } else {
      if (f32) launch_mma<true, 4, 1>(a, as_stream(s));
      else launch_mma<false, 4, 1>(a, as_stream(s));
    }
    return;
  }
  if (a.out == gemm_out::f32) launch_m<true>(a, as_stream(s));
  else launch_m<false>(a, as_stream(s));
}

}  // namespace specpipe::kernels::cuda
