#include "kernels/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace specpipe::kernels::cpu {

namespace {

// Keys scored per block before the running max/sum are rescaled.
constexpr std::int64_t key_block = 64;
// Largest head_dim accepted: a sanity bound on the checkpoint (the
// accumulators are per-thread buffers of any size).
constexpr std::int64_t max_head_dim = 512;
// Consecutive query positions that walk the keys together: each key block is
// read from memory once for all of them (and for every head of the GQA
// group) instead of once per query, which is what bounds a long prefill.
constexpr std::int64_t query_block = 8;

// The online-softmax state of one (query, head): the same arithmetic, in the
// same order, whichever queries share its walk over the keys (so outputs are
// bit-identical to a query walking alone). acc points into the same
// per-thread buffer, head_dim floats per state.
struct query_state {
  float* acc;
  float running_max;
  float running_sum;
};

// Scores keys j0 .. j0 + jn - 1 for one query and folds them into its state.
inline void attend_keys(const attention_args& a, const float* q, const float* k, const float* v,
                        std::int64_t j0, std::int64_t jn, float scale, query_state& st) {
  const std::int64_t d = a.head_dim;
  float scores[key_block];
  float block_max = -std::numeric_limits<float>::infinity();
  for (std::int64_t j = 0; j < jn; ++j) {
    scores[j] = dot(q, k + (j0 + j) * a.kv_stride, d) * scale;
    block_max = std::max(block_max, scores[j]);
  }
  const float new_max = std::max(st.running_max, block_max);
  // exp(-inf - finite) = 0 on the first block: the empty history vanishes.
  const float correction = std::exp(st.running_max - new_max);
  st.running_sum *= correction;
  for (std::int64_t i = 0; i < d; ++i) st.acc[i] *= correction;
  for (std::int64_t j = 0; j < jn; ++j) {
    const float p = std::exp(scores[j] - new_max);
    st.running_sum += p;
    const float* vr = v + (j0 + j) * a.kv_stride;
    for (std::int64_t i = 0; i < d; ++i) st.acc[i] += p * vr[i];
  }
  st.running_max = new_max;
}

// Queries i0 .. i1 - 1 (at most query_block) of every head of one KV head's
// group: key blocks outermost, each query stopping at its own position.
void attend_tile(const attention_args& a, std::int64_t i0, std::int64_t i1, std::int64_t kv_head,
                 std::int64_t group, float scale) {
  const std::int64_t d = a.head_dim;
  const std::int64_t count = (i1 - i0) * group;
  thread_local std::vector<query_state> states;
  thread_local std::vector<float> buffer;
  if (states.size() < std::size_t(count)) states.resize(std::size_t(count));
  if (buffer.size() < std::size_t(count * d)) buffer.resize(std::size_t(count * d));
  for (std::int64_t t = 0; t < count; ++t) {
    states[t].acc = buffer.data() + t * d;
    std::fill(states[t].acc, states[t].acc + d, 0.0f);
    states[t].running_max = -std::numeric_limits<float>::infinity();
    states[t].running_sum = 0.0f;
  }
  const float* k = a.k + kv_head * d;
  const float* v = a.v + kv_head * d;
  const std::int64_t last_of_tile = a.pos0 + i1 - 1;
  for (std::int64_t j0 = 0; j0 <= last_of_tile; j0 += key_block) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const std::int64_t last = a.pos0 + i;
      if (j0 > last) continue;
      const std::int64_t jn = std::min(key_block, last + 1 - j0);
      for (std::int64_t g = 0; g < group; ++g) {
        const std::int64_t h = kv_head * group + g;
        attend_keys(a, a.q + i * a.q_stride + h * d, k, v, j0, jn, scale, states[(i - i0) * group + g]);
      }
    }
  }
  for (std::int64_t i = i0; i < i1; ++i)
    for (std::int64_t g = 0; g < group; ++g) {
      const query_state& st = states[(i - i0) * group + g];
      float* out = a.out + i * a.out_stride + (kv_head * group + g) * d;
      const float inv = 1.0f / st.running_sum;
      for (std::int64_t x = 0; x < d; ++x) out[x] = st.acc[x] * inv;
    }
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
  // Work items: (block of query_block queries, KV head), later blocks first
  // (they attend to more keys), so the pool's chunks end together.
  const std::int64_t blocks = (a.n + query_block - 1) / query_block;
  auto body = [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t item = b; item < e; ++item) {
      const std::int64_t qb = blocks - 1 - item / a.n_kv_heads;
      const std::int64_t kvh = item % a.n_kv_heads;
      const std::int64_t i0 = qb * query_block;
      attend_tile(a, i0, std::min(a.n, i0 + query_block), kvh, group, scale);
    }
  };
  const std::int64_t items = blocks * a.n_kv_heads;
  if (pool)
    pool->parallel_for(items, body);
  else
    body(0, items);
}

}  // namespace specpipe::kernels::cpu
