#pragma once
// Device helpers shared by the kernels: 16-byte vectors of 8 bf16 and their
// conversion to f32. CUDA-only (included from .cu files).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace specpipe::kernels::cuda::detail {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ void bf16x8_to_f32(const uint4& v, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

__device__ __forceinline__ uint4 f32_to_bf16x8(const float (&f)[8]) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

// Programmatic dependent launch (sm_90). A kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start before the
// previous kernel on its stream has finished; grid_dependency_wait() blocks
// until that kernel has completed and its writes are visible. A kernel that
// calls allow_dependent_launch() lets such a dependent start once all its
// blocks have called it (or exited). Both are no-ops without PDL.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// x sigmoid(x), as the SwiGLU kernel and the 4-bit GEMV's SwiGLU epilogue
// both compute it (the same expression, so the same bits).
__device__ __forceinline__ float silu(float x) { return x / (1.f + __expf(-x)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// 64-bit mix (splitmix64's finalizer): a counter-based generator, so that any
// element's random value depends only on (seed, index) and not on the launch.
__device__ __forceinline__ std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The f32 value of raw f16 bits.
__device__ __forceinline__ float h2f(std::uint16_t h) { return __half2float(__ushort_as_half(h)); }

// Uniform in [0, 1) from the top 24 bits.
__device__ __forceinline__ float uniform01(std::uint64_t seed, std::uint64_t index) {
  const std::uint64_t h = mix64(seed ^ mix64(index));
  return float(h >> 40) * (1.0f / 16777216.0f);
}

// (x & mask) | bits as one LOP3: written as `&` and `|`, ptxas emits two
// LOP3s with an immediate each, an instruction more per call in the code
// extractions of the packed attention and the 4-bit GEMV (128 per
// 32-position chunk at 1 bit, 32 per 1 KB chunk of int4 weights); a single
// lop3 makes it keep the constants in registers instead.
__device__ __forceinline__ unsigned and_or(unsigned x, unsigned mask, unsigned bits) {
  unsigned d;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(d) : "r"(x), "r"(mask), "r"(bits));  // 0xea: (a & b) | c
  return d;
}

}  // namespace specpipe::kernels::cuda::detail
