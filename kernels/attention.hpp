#pragma once
// Causal grouped-query attention over a contiguous f32 K/V history:
//   out[i, h] = softmax_j(q[i, h] . k[j, g(h)] / sqrt(head_dim)) v[j, g(h)],
//   j = 0 .. pos0 + i,   g(h) = h / (n_heads / n_kv_heads)
// (HF repeat_kv: query head h reads KV head h / n_rep). Softmax is the online,
// max-subtracted form (Milakov & Gimelshein 2018, as in FlashAttention), so
// no row of scores is materialized and long prompts need O(1) scratch.
#include <cstdint>

namespace specpipe::kernels::cpu {

class thread_pool;

struct attention_args {
  const float* q = nullptr;     // [n, n_heads, head_dim], token stride q_stride
  std::int64_t q_stride = 0;    // elements; 0 means n_heads * head_dim
  const float* k = nullptr;     // [len, n_kv_heads, head_dim], token stride kv_stride
  const float* v = nullptr;     // same layout as k
  std::int64_t kv_stride = 0;   // elements; 0 means n_kv_heads * head_dim
  std::int64_t len = 0;         // rows available in k/v; must be >= pos0 + n
  float* out = nullptr;         // [n, n_heads, head_dim], token stride out_stride
  std::int64_t out_stride = 0;  // elements; 0 means n_heads * head_dim
  std::int64_t n = 0;           // query tokens
  std::int64_t pos0 = 0;        // position of query 0
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;
  std::int64_t head_dim = 0;
};

// Parallel over (block of 8 queries, KV head) tiles on `pool` (inline when
// null); each query's result is the same whatever the tiling. Throws
// std::invalid_argument when the heads do not divide or len < pos0 + n.
void attention(const attention_args& a, thread_pool* pool = nullptr);

}  // namespace specpipe::kernels::cpu
