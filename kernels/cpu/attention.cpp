#include "kernels/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace specpipe::kernels::cpu {

namespace {

// Keys scored per block before the running max/sum are rescaled.
constexpr std::int64_t key_block = 64;
// Largest head_dim the stack accumulator holds.
constexpr std::int64_t max_head_dim = 512;

// One (query, head): keys 0 .. last inclusive.
void attend_one(const attention_args& a, const float* q, std::int64_t kv_head, std::int64_t last,
                float scale, float* out) {
  const std::int64_t d = a.head_dim;
  float acc[max_head_dim];
  std::fill(acc, acc + d, 0.0f);
  float scores[key_block];
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  const float* k = a.k + kv_head * d;
  const float* v = a.v + kv_head * d;
  for (std::int64_t j0 = 0; j0 <= last; j0 += key_block) {
    const std::int64_t jn = std::min(key_block, last + 1 - j0);
    float block_max = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < jn; ++j) {
      scores[j] = dot(q, k + (j0 + j) * a.kv_stride, d) * scale;
      block_max = std::max(block_max, scores[j]);
    }
    const float new_max = std::max(running_max, block_max);
    // exp(-inf - finite) = 0 on the first block: the empty history vanishes.
    const float correction = std::exp(running_max - new_max);
    running_sum *= correction;
    for (std::int64_t i = 0; i < d; ++i) acc[i] *= correction;
    for (std::int64_t j = 0; j < jn; ++j) {
      const float p = std::exp(scores[j] - new_max);
      running_sum += p;
      const float* vr = v + (j0 + j) * a.kv_stride;
      for (std::int64_t i = 0; i < d; ++i) acc[i] += p * vr[i];
    }
    running_max = new_max;
  }
  const float inv = 1.0f / running_sum;
  for (std::int64_t i = 0; i < d; ++i) out[i] = acc[i] * inv;
}

}  // namespace

void attention(const attention_args& in_args, thread_pool* pool) {
  attention_args a = in_args;
  if (a.n <= 0) return;
  if (a.n_heads <= 0 || a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    throw std::invalid_argument("attention: n_heads " + std::to_string(a.n_heads) +
                                " is not a positive multiple of n_kv_heads " +
                                std::to_string(a.n_kv_heads));
  if (a.head_dim <= 0 || a.head_dim > max_head_dim)
    throw std::invalid_argument("attention: head_dim " + std::to_string(a.head_dim) +
                                " outside [1, " + std::to_string(max_head_dim) + "]");
  if (a.pos0 < 0 || a.len < a.pos0 + a.n)
    throw std::invalid_argument("attention: queries at positions " + std::to_string(a.pos0) +
                                ".." + std::to_string(a.pos0 + a.n - 1) + " need " +
                                std::to_string(a.pos0 + a.n) + " K/V rows, have " +
                                std::to_string(a.len));
  if (a.q_stride == 0) a.q_stride = a.n_heads * a.head_dim;
  if (a.kv_stride == 0) a.kv_stride = a.n_kv_heads * a.head_dim;
  if (a.out_stride == 0) a.out_stride = a.n_heads * a.head_dim;
  const std::int64_t group = a.n_heads / a.n_kv_heads;
  const float scale = float(1.0 / std::sqrt(double(a.head_dim)));
  auto body = [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t item = b; item < e; ++item) {
      const std::int64_t i = item / a.n_heads;
      const std::int64_t h = item % a.n_heads;
      attend_one(a, a.q + i * a.q_stride + h * a.head_dim, h / group, a.pos0 + i, scale,
                 a.out + i * a.out_stride + h * a.head_dim);
    }
  };
  const std::int64_t items = a.n * a.n_heads;
  if (pool)
    pool->parallel_for(items, body);
  else
    body(0, items);
}

}  // namespace specpipe::kernels::cpu
