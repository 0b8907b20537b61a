// Greedy and sampled token selection (see sampling.hpp).
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/sampling.hpp"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda {
namespace {

constexpr int sel_threads = 1024;

struct best {
  float v;
  std::int32_t i;
};
struct best_op {
  __device__ best operator()(const best& a, const best& b) const {
    if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
    return a;
  }
};

__device__ __forceinline__ best row_argmax(const float* x, std::int64_t vocab) {
  using reduce = cub::BlockReduce<best, sel_threads>;
  __shared__ typename reduce::TempStorage tmp;
  __shared__ best result;
  best b{-INFINITY, std::int32_t(vocab)};
  for (std::int64_t i = threadIdx.x; i < vocab; i += sel_threads) {
    const float v = x[i];
    if (v > b.v || (v == b.v && std::int32_t(i) < b.i)) b = {v, std::int32_t(i)};  // NaN compares false
  }
  b = reduce(tmp).Reduce(b, best_op{});
  if (threadIdx.x == 0) result = b.i < vocab ? b : best{-INFINITY, 0};
  __syncthreads();
  return result;
}

__global__ void __launch_bounds__(sel_threads)
    argmax_kernel(const float* logits, std::int64_t ld, std::int64_t vocab, std::int32_t* out) {
  const best b = row_argmax(logits + blockIdx.x * ld, vocab);
  if (threadIdx.x == 0) out[blockIdx.x] = b.i;
}

// Monotone map of floats to unsigned ints: a < b  <=>  key(a) < key(b).
__device__ __forceinline__ unsigned order_key(float f) {
  const unsigned u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

template <class T>
__device__ __forceinline__ T block_sum(T v) {
  using reduce = cub::BlockReduce<T, sel_threads>;
  __shared__ typename reduce::TempStorage tmp;
  __shared__ T result;
  v = reduce(tmp).Sum(v);
  if (threadIdx.x == 0) result = v;
  __syncthreads();
  const T r = result;
  __syncthreads();  // result may be rewritten by the next call
  return r;
}

__global__ void __launch_bounds__(sel_threads)
    sample_kernel(const float* logits, std::int64_t ld, std::int64_t vocab, gpu_sampling p,
                  std::int32_t* out) {
  const float* x = logits + blockIdx.x * ld;
  const best top = row_argmax(x, vocab);
  const float inv_t = 1.f / p.temperature;
  const float mx = top.v;
  // Weight of token i: exp((x_i - max) / T), in (0, 1].
  auto weight = [&](float v) { return __expf((v - mx) * inv_t); };

  // top-k: the largest key t with count(key >= t) >= k, built bit by bit.
  unsigned kthr = 0;
  if (p.top_k > 0 && p.top_k < vocab) {
    for (int bit = 31; bit >= 0; --bit) {
      const unsigned cand = kthr | (1u << bit);
      int c = 0;
      for (std::int64_t i = threadIdx.x; i < vocab; i += sel_threads) c += order_key(x[i]) >= cand;
      if (block_sum(c) >= p.top_k) kthr = cand;
    }
  }
  auto mass_above = [&](unsigned thr) {
    float m = 0.f;
    for (std::int64_t i = threadIdx.x; i < vocab; i += sel_threads) {
      const float v = x[i];
      if (order_key(v) >= thr) m += weight(v);
    }
    return block_sum(m);
  };
  const float kept_mass = mass_above(kthr);
  // top-p: the largest threshold whose kept mass still reaches top_p.
  unsigned thr = kthr;
  if (p.top_p < 1.f) {
    const float need = p.top_p * kept_mass;
    unsigned t = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const unsigned cand = t | (1u << bit);
      if (mass_above(cand > kthr ? cand : kthr) >= need) t = cand;
    }
    thr = t > kthr ? t : kthr;
  }
  const float total = p.top_p < 1.f ? mass_above(thr) : kept_mass;

  // Inverse CDF in vocabulary order: each thread owns a contiguous range.
  const float u = detail::uniform01(p.seed, p.counter + blockIdx.x) * total;
  const std::int64_t per = (vocab + sel_threads - 1) / sel_threads;
  const std::int64_t lo = threadIdx.x * per, hi = lo + per < vocab ? lo + per : vocab;
  float local = 0.f;
  for (std::int64_t i = lo; i < hi; ++i)
    if (order_key(x[i]) >= thr) local += weight(x[i]);
  using scan = cub::BlockScan<float, sel_threads>;
  __shared__ typename scan::TempStorage scan_tmp;
  float before = 0.f;
  scan(scan_tmp).ExclusiveSum(local, before);
  // Fallback for u landing past the last kept token by rounding: the argmax.
  if (threadIdx.x == 0) out[blockIdx.x] = top.i;
  __syncthreads();
  if (local > 0.f && u >= before && u < before + local) {
    float acc = before;
    std::int32_t pick = -1;
    for (std::int64_t i = lo; i < hi; ++i) {
      if (order_key(x[i]) < thr) continue;
      pick = std::int32_t(i);
      acc += weight(x[i]);
      if (u < acc) break;
    }
    out[blockIdx.x] = pick;
  }
}

}  // namespace

void argmax_rows(const float* logits, std::int64_t ld, std::int64_t rows, std::int64_t vocab,
                 std::int32_t* out, stream_t s) {
  if (rows <= 0) return;
  if (vocab <= 0) throw std::invalid_argument("argmax_rows: vocab must be > 0");
  argmax_kernel<<<unsigned(rows), sel_threads, 0, as_stream(s)>>>(logits, ld, vocab, out);
  CUDA_CHECK_LAUNCH();
}

void sample_rows(const float* logits, std::int64_t ld, std::int64_t rows, std::int64_t vocab,
                 const gpu_sampling& p, std::int32_t* out, stream_t s) {
  if (rows <= 0) return;
  if (vocab <= 0) throw std::invalid_argument("sample_rows: vocab must be > 0");
  if (!(p.temperature > 0.f))
    throw std::invalid_argument("sample_rows: temperature must be > 0 (use argmax_rows), got " +
                                std::to_string(p.temperature));
  if (!(p.top_p > 0.f && p.top_p <= 1.f))
    throw std::invalid_argument("sample_rows: top_p must be in (0, 1], got " + std::to_string(p.top_p));
  if (p.top_k < 0) throw std::invalid_argument("sample_rows: top_k must be >= 0");
  sample_kernel<<<unsigned(rows), sel_threads, 0, as_stream(s)>>>(logits, ld, vocab, p, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda
