#pragma once
// Entry points of the element-wise CUDA kernels of the Llama forward pass.
// bf16 tensors are passed as std::uint16_t bit patterns; all math is f32.
// Pure functions: raw device pointers, sizes, strides (in elements) and a
// stream; nothing allocates. Throw cuda_error on a failed launch.
// `dependent`: launch as a programmatic dependent (PDL, sm_90) of the kernel
// before it on the stream, so that its launch overlaps that kernel's tail
// (kernels/cuda/launch.cuh); the result is the same either way.
#include <cstdint>

#include "kernels/cuda/cuda_error.hpp"

namespace specpipe::kernels::cuda {

// RMSNorm with an optional fused residual add (HF LlamaRMSNorm):
//   if delta: residual[r] += delta[r]           (residual is the f32 stream)
//   out[r] = residual[r] * rsqrt(mean(residual[r]^2) + eps) * weight
// residual [rows, hidden] row stride ld_res; delta bf16 [rows, hidden] stride
// ld_delta (nullable); weight f32 [hidden]; out bf16 [rows, hidden] stride ld_out.
void rmsnorm(float* residual, std::int64_t ld_res, const std::uint16_t* delta, std::int64_t ld_delta,
             const float* weight, std::uint16_t* out, std::int64_t ld_out, std::int64_t rows,
             std::int64_t hidden, float eps, stream_t s, bool dependent = false);

// RoPE (HF rotate-half) on q and k, and the KV-cache append, in one pass over
// the fused QKV projection output. For token t, row qkv[t] = [q | k | v] with
// q [n_heads, head_dim], k and v [n_kv_heads, head_dim]; angle = pos * inv_freq[i]:
//   x'[i]       = x[i] cos - x[i + d/2] sin,   x'[i + d/2] = x[i + d/2] cos + x[i] sin.
// q is rotated in place; rotated k and plain v are written to the caches at
//   cache[((slot[t] * n_kv_heads + h) * capacity + row) * head_dim + i],
// row = pos[t], or pos[t] % ring for a ring of `ring` rows (the window of a
// quantized cache; then capacity == ring).
// inv_freq: head_dim/2 f32 (any scaling already applied by the caller).
struct rope_append_args {
  std::uint16_t* qkv = nullptr;
  std::int64_t ld_qkv = 0;
  std::uint16_t* k_cache = nullptr;
  std::uint16_t* v_cache = nullptr;
  std::int64_t capacity = 0;
  const std::int32_t* slots = nullptr;      // [tokens], device
  const std::int32_t* positions = nullptr;  // [tokens], device
  const float* inv_freq = nullptr;          // [head_dim / 2], device
  std::int64_t tokens = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  std::int64_t ring = 0;  // 0: row = position
  bool dependent = false;  // a programmatic dependent launch (see above)
};
void rope_append(const rope_append_args& a, stream_t s);

// SwiGLU over a fused [gate | up] projection: out[r][i] = silu(gu[r][i]) * gu[r][inter + i],
// silu(x) = x / (1 + e^-x). gu [rows, 2*inter] stride ld_gu; out [rows, inter] stride ld_out.
void swiglu(const std::uint16_t* gu, std::int64_t ld_gu, std::uint16_t* out, std::int64_t ld_out,
            std::int64_t rows, std::int64_t inter, stream_t s, bool dependent = false);

// out[t] = f32(embed[tokens[t]]); ids outside [0, vocab) give NaN rows so that
// a bad id cannot pass silently (callers validate ids on the host first).
void embedding(const std::uint16_t* embed, std::int64_t vocab, std::int64_t hidden,
               const std::int32_t* tokens, std::int64_t n, float* out, std::int64_t ld_out,
               stream_t s);

// dst[i] = bf16(lo + (hi - lo) * u(seed, i)), u uniform in [0,1) from a hash of
// (seed, i): weights for benchmarks generated on the device.
void fill_uniform_bf16(std::uint16_t* dst, std::int64_t n, float lo, float hi, std::uint64_t seed,
                       stream_t s);
void fill_uniform_f32(float* dst, std::int64_t n, float lo, float hi, std::uint64_t seed, stream_t s);
// The same in f16 (packed-cache scales and zeros for benchmarks).
void fill_uniform_f16(std::uint16_t* dst, std::int64_t n, float lo, float hi, std::uint64_t seed, stream_t s);

// Element type conversion on upload: src of `src_dtype` (0 = f32, 1 = f16,
// 2 = bf16, as memory/dtype.hpp orders them) to bf16 or f32.
void convert_to_bf16(const void* src, int src_dtype, std::uint16_t* dst, std::int64_t n, stream_t s);
void convert_to_f32(const void* src, int src_dtype, float* dst, std::int64_t n, stream_t s);

}  // namespace specpipe::kernels::cuda
