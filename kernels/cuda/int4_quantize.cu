// 4-bit group quantization of bf16 weights on the GPU (int4_quantize.hpp),
// mirroring kernels/cpu/int4_linear.cpp's quantize_rows operation by
// operation.
//
// One warp per (row, group). Lane l packs bytes l, l + 32, ... of the group
// (columns 2j and 2j + 1 of byte j), so the byte stores of a warp are
// contiguous and no byte is written by two threads; the group's values stay
// in registers between the min/max pass and the coding pass (STEPS bytes per
// lane, a template argument so the arrays are indexed at compile time). The
// warp of a row's last group also zeroes the row's padding bytes. This runs
// once per weight at load time, so it is written for exactness first; it
// reads each weight once and writes 0.5 byte, memory bound either way.
#include <cuda_bf16.h>

#include <climits>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/int4_quantize.hpp"

namespace specpipe::kernels::cuda {
namespace {

constexpr int quant_threads = 256;
constexpr int quant_warps = quant_threads / 32;
constexpr std::int64_t quant_max_group = 1024;  // kernels/cpu/int4_linear.cpp's max_group

__device__ __forceinline__ float bf16_bits_to_f32(unsigned short h) { return __uint_as_float(unsigned(h) << 16); }

// memory/dtype.cpp's f16_to_f32 and f32_to_f16, in the same integer steps
// (round to nearest even, overflow to infinity, NaN to sign | 0x7e00), so the
// NaN and overflow cases match the CPU too, not only the finite ones.
__device__ __forceinline__ float f16_bits_to_f32(unsigned short h) {
  const unsigned sign = unsigned(h & 0x8000u) << 16;
  const unsigned exp = (h >> 10) & 0x1fu;
  const unsigned mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return __uint_as_float(sign);
    const float v = __fmul_rn(float(mant), 0x1p-24f);  // subnormal half: exact in f32
    return sign ? -v : v;
  }
  if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
  return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

__device__ __forceinline__ unsigned short f32_to_f16_bits(float f) {
  const unsigned bits = __float_as_uint(f);
  const unsigned short sign = (bits >> 16) & 0x8000u;
  const unsigned abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;
  if (abs >= 0x477ff000u) return sign | 0x7c00u;
  if (abs < 0x38800000u) {
    if (abs < 0x33000000u) return sign;
    const unsigned exp = abs >> 23;
    const unsigned mant = (abs & 0x7fffffu) | 0x800000u;
    const unsigned shift = 126u - exp;
    unsigned q = mant >> shift;
    const unsigned rem = mant & ((1u << shift) - 1u);
    const unsigned half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return sign | (unsigned short)(q);
  }
  unsigned v = abs - (112u << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  return sign | (unsigned short)(v >> 13);
}

// The CPU's f16_next_down / f16_next_up / f16_at_or_below / f16_at_or_above.
__device__ __forceinline__ unsigned short f16_next_down(unsigned short h) {
  if (h & 0x8000u) return (unsigned short)(h + 1);
  if ((h & 0x7fffu) == 0) return 0x8001u;
  return (unsigned short)(h - 1);
}
__device__ __forceinline__ unsigned short f16_next_up(unsigned short h) {
  if ((h & 0x7fffu) == 0) return 0x0001u;
  if (h & 0x8000u) return (unsigned short)(h - 1);
  return (unsigned short)(h + 1);
}
__device__ __forceinline__ unsigned short f16_at_or_below(float v) {
  unsigned short h = f32_to_f16_bits(v);
  if (f16_bits_to_f32(h) > v) h = f16_next_down(h);
  return h;
}
__device__ __forceinline__ unsigned short f16_at_or_above(float v) {
  unsigned short h = f32_to_f16_bits(v);
  if (f16_bits_to_f32(h) < v) h = f16_next_up(h);
  return h;
}

// A candidate extreme: its value and its column within the group. The CPU's
// running std::min / std::max replace only on a strict improvement, so it
// keeps the first of equal values, which matters for -0 and +0 (they compare
// equal but round to different f16 zeros). Ordering ties by column makes the
// warp's butterfly reduction pick that same element in any order. NaN never
// improves anything, as on the CPU (the first element aside, handled apart).
struct extreme {
  float v;
  int col;
};
__device__ __forceinline__ bool better_low(const extreme& a, const extreme& b) {
  return a.v < b.v || (a.v == b.v && a.col < b.col);
}
__device__ __forceinline__ bool better_high(const extreme& a, const extreme& b) {
  return a.v > b.v || (a.v == b.v && a.col < b.col);
}

// One code: floor((v - z) / s + 0.5) clamped to [0, 15]; each operation
// rounded apart as the CPU does it. A NaN quotient (only reachable through
// non-finite weights) codes 0, as the CPU's float -> uint8_t does on x86-64.
__device__ __forceinline__ unsigned code_of(float v, float z, float s) {
  if (!(s > 0.f)) return 0;
  const float t = floorf(__fadd_rn(__fdiv_rn(__fsub_rn(v, z), s), 0.5f));
  if (!(t > 0.f)) return 0;  // negative, zero or NaN
  return t < 15.f ? unsigned(t) : 15u;
}

template <int STEPS>
__global__ void __launch_bounds__(quant_threads)
    int4_quantize_kernel(const unsigned short* __restrict__ w, std::int64_t ldw, std::uint8_t* __restrict__ codes,
                         std::int64_t code_stride, unsigned short* __restrict__ scale,
                         unsigned short* __restrict__ zero, std::int64_t out, std::int64_t in, std::int64_t group,
                         std::int64_t groups) {
  const int lane = threadIdx.x & 31;
  const std::int64_t item = std::int64_t(blockIdx.x) * quant_warps + (threadIdx.x >> 5);
  if (item >= out * groups) return;  // whole warps only; no block-wide synchronization below
  const std::int64_t row = item / groups, g = item % groups;
  const std::int64_t c0 = g * group;
  const int len = int((in - c0 < group ? in - c0 : group));  // the last group may be shorter
  const int nb = (len + 1) / 2;                               // code bytes of the group
  const unsigned short* src = w + row * ldw + c0;

  // Load the group (two columns per byte; a missing odd column of the
  // matrix's last byte reads as +0 and codes nothing).
  float v[STEPS][2];
  extreme lo{__int_as_float(0x7f800000), INT_MAX}, hi{__int_as_float(0xff800000), INT_MAX};
#pragma unroll
  for (int k = 0; k < STEPS; ++k) {
    const int j = lane + 32 * k;
    v[k][0] = v[k][1] = 0.f;
    if (j < nb) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 2 * j + e;
        if (col < len) {
          v[k][e] = bf16_bits_to_f32(__ldg(src + col));
          const extreme x{v[k][e], col};
          if (better_low(x, lo)) lo = x;
          if (better_high(x, hi)) hi = x;
        }
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const extreme l{__shfl_xor_sync(0xffffffffu, lo.v, o), __shfl_xor_sync(0xffffffffu, lo.col, o)};
    const extreme h{__shfl_xor_sync(0xffffffffu, hi.v, o), __shfl_xor_sync(0xffffffffu, hi.col, o)};
    if (better_low(l, lo)) lo = l;
    if (better_high(h, hi)) hi = h;
  }
  // The CPU starts both from the first element, which nothing can replace
  // when it is NaN: then both extremes are that NaN.
  const float first = __shfl_sync(0xffffffffu, v[0][0], 0);
  if (isnan(first)) lo.v = hi.v = first;

  // Zero rounded down, then the scale that reaches max from it, rounded up.
  const unsigned short zh = f16_at_or_below(lo.v);
  const float z = f16_bits_to_f32(zh);
  const float d = __fsub_rn(hi.v, z);
  unsigned short sh;
  if (isnan(d)) {
    // NaN scale: the GPU's NaN is canonical, the CPU's (SSE) keeps the NaN
    // operand's sign (the first element's) or, for inf - inf, is negative.
    sh = isnan(hi.v) ? (unsigned short)(((__float_as_uint(hi.v) >> 16) & 0x8000u) | 0x7e00u)
                      : (unsigned short)0xfe00u;
  } else {
    sh = f16_at_or_above(__fdiv_rn(d, 15.f));
  }
  const float s = f16_bits_to_f32(sh);
  if (lane == 0) {
    zero[row * groups + g] = zh;
    scale[row * groups + g] = sh;
  }

  std::uint8_t* dst = codes + row * code_stride + c0 / 2;
#pragma unroll
  for (int k = 0; k < STEPS; ++k) {
    const int j = lane + 32 * k;
    if (j < nb) {
      const unsigned lo_code = code_of(v[k][0], z, s);
      const unsigned hi_code = 2 * j + 1 < len ? code_of(v[k][1], z, s) : 0u;
      dst[j] = std::uint8_t(lo_code | (hi_code << 4));
    }
  }
  if (g == groups - 1) {
    // The destination is uninitialised: the padding up to code_stride is
    // written too, as the CPU's zero-filled rows have it.
    std::uint8_t* row_codes = codes + row * code_stride;
    for (std::int64_t b = (in + 1) / 2 + lane; b < code_stride; b += 32) row_codes[b] = 0;
  }
}

template <int STEPS>
void launch(const int4_quantize_args& a, std::int64_t groups, std::int64_t blocks, cudaStream_t s) {
  int4_quantize_kernel<STEPS><<<unsigned(blocks), quant_threads, 0, s>>>(
      reinterpret_cast<const unsigned short*>(a.w), a.ldw, a.codes, a.code_stride,
      reinterpret_cast<unsigned short*>(a.scale), reinterpret_cast<unsigned short*>(a.zero), a.out, a.in, a.group,
      groups);
  CUDA_CHECK_LAUNCH();
}

// Every message starts with the offending field's name.
void fail(const std::string& what) { throw std::invalid_argument("int4_quantize: " + what); }

bool aligned2(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 2 == 0; }

}  // namespace

void int4_quantize(const int4_quantize_args& a, stream_t s) {
  if (!a.w) fail("w is null");
  if (!a.codes) fail("codes is null");
  if (!a.scale) fail("scale is null");
  if (!a.zero) fail("zero is null");
  if (!aligned2(a.w)) fail("w is not 2-byte aligned (bf16 elements)");
  if (!aligned2(a.scale)) fail("scale is not 2-byte aligned (f16 elements)");
  if (!aligned2(a.zero)) fail("zero is not 2-byte aligned (f16 elements)");
  if (a.out <= 0) fail("out must be positive, got " + std::to_string(a.out));
  if (a.in <= 0) fail("in must be positive, got " + std::to_string(a.in));
  if (a.group <= 0 || a.group % 2 != 0 || a.group > quant_max_group)
    fail("group must be even and in [2, " + std::to_string(quant_max_group) + "], got " + std::to_string(a.group));
  if (a.ldw < a.in)
    fail("ldw " + std::to_string(a.ldw) + " is shorter than a row of in=" + std::to_string(a.in) + " elements");
  if (a.code_stride < (a.in + 1) / 2)
    fail("code_stride " + std::to_string(a.code_stride) + " bytes is shorter than a row of " + std::to_string(a.in) +
         " 4-bit codes");
  const std::int64_t groups = (a.in + a.group - 1) / a.group;
  if (a.out > (std::int64_t(INT_MAX) * quant_warps) / groups)
    fail("out " + std::to_string(a.out) + " times " + std::to_string(groups) + " groups exceeds one launch's grid");
  const std::int64_t blocks = (a.out * groups + quant_warps - 1) / quant_warps;
  const cudaStream_t st = as_stream(s);
  // Bytes per lane: group / 2 bytes over 32 lanes.
  const std::int64_t steps = (a.group / 2 + 31) / 32;
  if (steps <= 1) launch<1>(a, groups, blocks, st);
  else if (steps <= 2) launch<2>(a, groups, blocks, st);
  else if (steps <= 4) launch<4>(a, groups, blocks, st);
  else if (steps <= 8) launch<8>(a, groups, blocks, st);
  else launch<16>(a, groups, blocks, st);
}

}  // namespace specpipe::kernels::cuda
