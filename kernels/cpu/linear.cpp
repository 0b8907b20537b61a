#include "kernels/linear.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace specpipe::kernels::cpu {

namespace {

// Eight independent accumulators break the add dependency chain and map onto
// one AVX (or two SSE) registers, so the loops below vectorize at -O3.
constexpr int lanes = 8;
// Tokens per block in prefill: each weight row chunk is widened once and used
// by this many tokens while it sits in L1.
constexpr int token_block = 8;
// Weight elements widened per step of the prefill path (4 KiB of f32 scratch).
constexpr std::int64_t k_chunk = 1024;

float reduce_lanes(const float* acc) {
  // Fixed pairwise order, shared by both paths.
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// One output element for one token: W row widened as it is read (decode, GEMV).
template <class L>
float dot_row(const typename L::storage* w, const float* x, std::int64_t in) {
  float acc[lanes] = {};
  std::int64_t i = 0;
  for (; i + lanes <= in; i += lanes)
    for (int j = 0; j < lanes; ++j) acc[j] += x[i + j] * L::load(w[i + j]);
  for (int j = 0; i + j < in; ++j) acc[j] += x[i + j] * L::load(w[i + j]);
  return reduce_lanes(acc);
}

template <class L>
void rows_single_token(const linear_args& a, std::int64_t r0, std::int64_t r1) {
  const auto* w = static_cast<const typename L::storage*>(a.w);
  for (std::int64_t r = r0; r < r1; ++r) a.y[r] = dot_row<L>(w + r * a.w_stride, a.x, a.in);
}

// Output rows [r0, r1) for a block of nt <= token_block tokens starting at t0.
// Accumulates lane j over elements i == j (mod 8) in increasing i, exactly as
// dot_row does, so results match the single-token path bit for bit.
template <class L>
void rows_token_block(const linear_args& a, std::int64_t r0, std::int64_t r1, std::int64_t t0,
                      int nt) {
  const auto* w = static_cast<const typename L::storage*>(a.w);
  alignas(64) float wrow[k_chunk];
  for (std::int64_t r = r0; r < r1; ++r) {
    float acc[token_block][lanes] = {};
    const auto* wr = w + r * a.w_stride;
    for (std::int64_t k0 = 0; k0 < a.in; k0 += k_chunk) {
      const std::int64_t kn = std::min(k_chunk, a.in - k0);
      for (std::int64_t i = 0; i < kn; ++i) wrow[i] = L::load(wr[k0 + i]);
      for (int t = 0; t < nt; ++t) {
        const float* x = a.x + (t0 + t) * a.x_stride + k0;
        float* ac = acc[t];
        std::int64_t i = 0;
        for (; i + lanes <= kn; i += lanes)
          for (int j = 0; j < lanes; ++j) ac[j] += x[i + j] * wrow[i + j];
        // k_chunk is a multiple of `lanes`, so a tail only occurs at the row's end.
        for (int j = 0; i + j < kn; ++j) ac[j] += x[i + j] * wrow[i + j];
      }
    }
    for (int t = 0; t < nt; ++t) a.y[(t0 + t) * a.y_stride + r] = reduce_lanes(acc[t]);
  }
}

static_assert(k_chunk % lanes == 0);

}  // namespace

void linear(const linear_args& in_args, thread_pool* pool) {
  linear_args a = in_args;
  if (a.n < 0 || a.in <= 0 || a.out <= 0)
    throw std::invalid_argument("linear: bad sizes n=" + std::to_string(a.n) + " in=" +
                                std::to_string(a.in) + " out=" + std::to_string(a.out));
  if (a.x_stride == 0) a.x_stride = a.in;
  if (a.w_stride == 0) a.w_stride = a.in;
  if (a.y_stride == 0) a.y_stride = a.out;
  if (a.x_stride < a.in || a.w_stride < a.in || a.y_stride < a.out)
    throw std::invalid_argument("linear: a row stride is shorter than its row");
  if (a.n == 0) return;
  dispatch_float_dtype(a.w_type, "linear weight", [&](auto loader) {
    using L = decltype(loader);
    // Enough rows per chunk that the per-chunk overhead stays small next to
    // the weight bytes it streams.
    const std::int64_t min_rows = std::max<std::int64_t>(1, 16384 / a.in);
    auto body = [&](std::int64_t r0, std::int64_t r1) {
      if (a.n == 1) {
        rows_single_token<L>(a, r0, r1);
        return;
      }
      for (std::int64_t t0 = 0; t0 < a.n; t0 += token_block)
        rows_token_block<L>(a, r0, r1, t0, int(std::min<std::int64_t>(token_block, a.n - t0)));
    };
    if (pool)
      pool->parallel_for(a.out, body, min_rows);
    else
      body(0, a.out);
  });
}

}  // namespace specpipe::kernels::cpu
