// RoPE on q and k plus the KV-cache append, fused: one pass over the QKV
// projection output instead of three.
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/elementwise.hpp"

namespace specpipe::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int rope_threads = 256;

__global__ void __launch_bounds__(rope_threads) rope_append_kernel(rope_append_args a) {
  const std::int64_t t = blockIdx.x;
  const int half = a.head_dim / 2;
  const std::int32_t pos = a.positions[t];
  const std::int32_t slot = a.slots[t];
  const std::int64_t crow = a.ring > 0 ? std::int64_t(pos) % a.ring : std::int64_t(pos);  // cache row
  bf16* row = reinterpret_cast<bf16*>(a.qkv) + t * a.ld_qkv;
  bf16* kc = reinterpret_cast<bf16*>(a.k_cache);
  bf16* vc = reinterpret_cast<bf16*>(a.v_cache);
  const int rot_heads = a.n_heads + a.n_kv_heads;  // q heads, then k heads
  // Rotated pairs (q and k heads), then the v copy.
  const int pairs = rot_heads * half;
  const int v_elems = a.n_kv_heads * a.head_dim;
  for (int idx = threadIdx.x; idx < pairs + v_elems; idx += rope_threads) {
    if (idx < pairs) {
      const int h = idx / half;
      const int i = idx - h * half;
      bf16* x = row + std::int64_t(h) * a.head_dim;
      // HF: freqs = inv_freq * position in f32, then cos/sin (precise
      // versions: the argument reaches 1e5 radians at long contexts).
      float sn, cs;
      sincosf(float(pos) * a.inv_freq[i], &sn, &cs);
      const float x0 = __bfloat162float(x[i]);
      const float x1 = __bfloat162float(x[i + half]);
      const bf16 r0 = __float2bfloat16(x0 * cs - x1 * sn);
      const bf16 r1 = __float2bfloat16(x1 * cs + x0 * sn);
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
}

}  // namespace

void rope_append(const rope_append_args& a, stream_t s) {
  if (a.tokens <= 0) return;
  rope_append_kernel<<<unsigned(a.tokens), rope_threads, 0, as_stream(s)>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda
