// The 4-bit weight GEMV of QuantSpec's draft (kernels/cuda/int4_gemv.hpp).
//
// At decode the product is bound by reading the codes once: n*k/2 bytes plus
// 4 bytes of scale and zero per 128 weights, a quarter of the bf16 GEMV's
// bytes. The layout is the CPU reference's (kernels/int4_linear.hpp): a row's
// codes are contiguous, two per byte, so a lane's 16-byte load brings 32
// consecutive codes of one group (group is a multiple of 32). Nibbles become
// floats by the exponent trick (2^23 + q as bits, minus 2^23: two full-rate
// ops instead of a quarter-rate integer conversion), once per row and step,
// and are then used by all m inputs. x is read through the read-only cache;
// its 32 elements per lane are re-read by every warp (L1/L2 resident).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/int4_gemv.hpp"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda {
namespace {

using detail::bf16;

constexpr int int4_threads = 256;
constexpr int int4_warps = int4_threads / 32;
constexpr int int4_rows_per_warp = 2;
constexpr int int4_lane_codes = 32;                   // codes per 16-byte load
constexpr int int4_warp_cols = 32 * int4_lane_codes;  // columns one warp covers per load
constexpr int int4_unroll = 4;                        // loads per row in flight per lane

__device__ __forceinline__ unsigned word_of(const uint4& v, int w) {
  return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

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

template <int M, bool OutF32>
void launch(const int4_gemv_args& a, cudaStream_t s) {
  const std::int64_t rows_per_block = std::int64_t(int4_warps) * int4_rows_per_warp;
  const dim3 grid(unsigned((a.n + rows_per_block - 1) / rows_per_block));
  const std::int64_t groups = (a.k + a.group - 1) / a.group;
  int4_gemv_kernel<M, OutF32><<<grid, int4_threads, 0, s>>>(
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
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  return a.m >= 1 && a.m <= int4_gemv_max_rows && a.k > 0 && a.k % 32 == 0 && a.group > 0 && a.group % 32 == 0 &&
         a.code_stride % 16 == 0 && a.code_stride >= a.k / 2 && a.ldx % 8 == 0 && aligned(a.x) && aligned(a.codes);
}

void int4_gemv(const int4_gemv_args& a, stream_t s) {
  if (a.n <= 0 || a.k <= 0 || a.m < 0 || a.ldx < a.k || a.ldy < a.n || !a.scale || !a.zero || !a.codes || !a.y)
    throw std::invalid_argument("int4_gemv: bad shape or missing pointers: m=" + std::to_string(a.m) + " n=" +
                                std::to_string(a.n) + " k=" + std::to_string(a.k) + " ldx=" + std::to_string(a.ldx) +
                                " ldy=" + std::to_string(a.ldy));
  if (a.accumulate && a.out != gemm_out::f32) throw std::invalid_argument("int4_gemv: accumulate needs an f32 output");
  if (a.m == 0) return;
  if (!int4_gemv_supported(a))
    throw std::invalid_argument("int4_gemv: needs 1 <= m <= 8, k and group multiples of 32, code_stride a multiple "
                                "of 16 holding k/2 bytes, ldx a multiple of 8 and 16-byte aligned x and codes; got m=" +
                                std::to_string(a.m) + " k=" + std::to_string(a.k) + " group=" +
                                std::to_string(a.group) + " code_stride=" + std::to_string(a.code_stride) +
                                " ldx=" + std::to_string(a.ldx));
  if (a.out == gemm_out::f32) launch_m<true>(a, as_stream(s));
  else launch_m<false>(a, as_stream(s));
}

}  // namespace specpipe::kernels::cuda
