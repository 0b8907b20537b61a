// RoPE on q and k plus the KV-cache append, fused: one pass over the QKV
// projection output instead of three.
//
// One thread per unit of work (a rotated pair of a q or k head, or one v
// element), spread over as many blocks as the token needs: at decode this is
// a handful of rows, and a single block per token walking its ~3.5k units in
// a loop was a chain of dependent loads (~14 round trips at llama3-8b's
// shape) on one SM.
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rope_rotate.cuh"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int rope_threads = 128;

__global__ void __launch_bounds__(rope_threads) rope_append_kernel(rope_append_args a) {
  const std::int64_t t = blockIdx.x;
  const int half = a.head_dim / 2;
  const int rot_heads = a.n_heads + a.n_kv_heads;  // q heads, then k heads
  const int pairs = rot_heads * half;
  const int v_elems = a.n_kv_heads * a.head_dim;
  const int idx = blockIdx.y * rope_threads + threadIdx.x;
  // The frequency is a constant of the model: read before waiting for the
  // QKV projection.
  const float freq = idx < pairs ? a.inv_freq[idx % half] : 0.f;
  detail::grid_dependency_wait();
  detail::allow_dependent_launch();
  if (idx >= pairs + v_elems) return;
  const std::int32_t pos = a.positions[t];
  const std::int32_t slot = a.slots[t];
  const std::int64_t crow = a.ring > 0 ? std::int64_t(pos) % a.ring : std::int64_t(pos);  // cache row
  bf16* row = reinterpret_cast<bf16*>(a.qkv) + t * a.ld_qkv;
  bf16* kc = reinterpret_cast<bf16*>(a.k_cache);
  bf16* vc = reinterpret_cast<bf16*>(a.v_cache);
  if (idx < pairs) {
    const int h = idx / half;
    const int i = idx - h * half;
    bf16* x = row + std::int64_t(h) * a.head_dim;
    bf16 r0, r1;
    detail::rope_rotate(__bfloat162float(x[i]), __bfloat162float(x[i + half]), pos, freq, r0, r1);
    if (h < a.n_heads) {
      x[i] = r0;
      x[i + half] = r1;
    } else {
      const int kh = h - a.n_heads;
      bf16* dst = kc + ((std::int64_t(slot) * a.n_kv_heads + kh) * a.capacity + crow) * a.head_dim;
      dst[i] = r0;
      dst[i + half] = r1;
    }
  } else {
    const int e = idx - pairs;
    const int kh = e / a.head_dim;
    const int i = e - kh * a.head_dim;
    const bf16* v = row + std::int64_t(rot_heads) * a.head_dim;
    vc[((std::int64_t(slot) * a.n_kv_heads + kh) * a.capacity + crow) * a.head_dim + i] = v[e];
  }
}

}  // namespace

void rope_append(const rope_append_args& a, stream_t s) {
  if (a.tokens <= 0) return;
  const int units = (a.n_heads + a.n_kv_heads) * (a.head_dim / 2) + a.n_kv_heads * a.head_dim;
  // Tokens on x (up to 2^31 - 1), the token's units on y (a few dozen blocks).
  const dim3 grid(unsigned(a.tokens), unsigned((units + rope_threads - 1) / rope_threads));
  detail::launch_kernel(rope_append_kernel, grid, dim3(rope_threads), 0, as_stream(s), a.dependent, a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda
