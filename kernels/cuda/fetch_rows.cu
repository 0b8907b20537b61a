// SpeCache's top-k rows from the host store (see fetch_rows.hpp).
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/fetch_rows.hpp"

namespace specpipe::kernels::cuda {
namespace {

constexpr int kMaxK = 1024;

// kThreads x kLoads 16-byte loads in flight per block. Few (row, head)
// pairs (small batches): 256 threads x 8, so that the few blocks still have
// many reads in flight. Many (SpeCache at its largest batch: 632 blocks a
// layer): 64 x 16, a quarter of the warps for the same bytes in flight per
// block, since the link, not the warps, sets the rate (the gather sweep of
// NOTES.md) and the layers' kernels run beside on the same SMs.
template <int kThreads, int kLoads>
__global__ void __launch_bounds__(kThreads) fetch_rows_kernel(fetch_rows_args a) {
  const int h = blockIdx.x, r = blockIdx.y;
  const int nkv = a.n_kv_heads;
  const std::int64_t s = a.row_slot[r];
  const int n = a.topk_count[std::int64_t(r) * nkv + h];
  const std::int32_t* in = a.topk_positions + (std::int64_t(r) * nkv + h) * a.k;
  __shared__ std::int32_t unsorted[kMaxK], sorted[kMaxK];
  for (int i = threadIdx.x; i < n; i += kThreads) unsorted[i] = in[i];
  __syncthreads();
  // Rank sort: position i goes where the smaller ones (ties: earlier index) end.
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const std::int32_t p = unsorted[i];
    int rank = 0;
    for (int j = 0; j < n; ++j) {
      const std::int32_t q = unsorted[j];
      rank += (q < p || (q == p && j < i)) ? 1 : 0;
    }
    sorted[rank] = p;
  }
  __syncthreads();
  const std::int64_t dst = (s * nkv + h) * a.k;
  for (int i = threadIdx.x; i < n; i += kThreads) a.positions[dst + i] = sorted[i];
  if (threadIdx.x == 0) a.count[s * nkv + h] = n;

  // Rows: K's head_dim / 8 chunks of 16 bytes, then V's.
  const int half = a.head_dim / 8, cpr = 2 * half;
  const uint4* store = reinterpret_cast<const uint4*>(a.store);
  uint4* kout = reinterpret_cast<uint4*>(a.k_rows) + dst * half;
  uint4* vout = reinterpret_cast<uint4*>(a.v_rows) + dst * half;
  const std::int64_t run = (s * nkv + h) * a.store_tokens;
  const int total = n * cpr;
  for (int base = 0; base < total; base += kThreads * kLoads) {
    uint4 v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int c = base + u * kThreads + threadIdx.x;
      if (c < total) {
        const int row = c / cpr, col = c - row * cpr;
        v[u] = store[(run + sorted[row] % a.store_tokens) * cpr + col];
      }
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int c = base + u * kThreads + threadIdx.x;
      if (c < total) {
        const int row = c / cpr, col = c - row * cpr;
        if (col < half) kout[std::int64_t(row) * half + col] = v[u];
        else vout[std::int64_t(row) * half + col - half] = v[u];
      }
    }
  }
}

__global__ void count_hits_kernel(count_hits_args a) {
  const int h = blockIdx.x, r = blockIdx.y, lane = threadIdx.x;
  const int nkv = a.n_kv_heads;
  const std::int64_t s = a.row_slot[r];
  const std::int32_t* f = a.fetched_positions + (s * nkv + h) * a.fetched_stride;
  const int nf = a.fetched_count[s * nkv + h];
  const int n = a.needed_count[std::int64_t(r) * nkv + h];
  unsigned hits = 0;
  for (int i = lane; i < n; i += 32) {
    const std::int32_t p = a.needed[(std::int64_t(r) * nkv + h) * a.k + i];
    int lo = 0, hi = nf;  // first fetched position >= p
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (f[mid] < p) lo = mid + 1;
      else hi = mid;
    }
    hits += (lo < nf && f[lo] == p) ? 1u : 0u;
  }
  for (int off = 16; off > 0; off >>= 1) hits += __shfl_xor_sync(0xffffffffu, hits, off);
  if (lane == 0) {
    atomicAdd(&a.totals[0], static_cast<unsigned long long>(n));
    atomicAdd(&a.totals[1], static_cast<unsigned long long>(hits));
  }
}

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("cuda::fetch_rows: " + what); }

bool aligned(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

}  // namespace

void fetch_rows(const fetch_rows_args& a, stream_t s) {
  if (a.rows == 0) return;
  if (a.rows < 0) fail("rows must be >= 0");
  if (!a.topk_positions || !a.topk_count || !a.row_slot || !a.store || !a.positions || !a.count || !a.k_rows ||
      !a.v_rows)
    fail("every array must be given");
  if (a.k < 1 || a.k > kMaxK) fail("k must be in [1, " + std::to_string(kMaxK) + "], got " + std::to_string(a.k));
  if (a.n_kv_heads < 1 || a.store_tokens < 1) fail("n_kv_heads and store_tokens must be >= 1");
  if (a.head_dim < 8 || a.head_dim % 8 != 0)
    fail("head_dim must be a positive multiple of 8, got " + std::to_string(a.head_dim));
  if (!aligned(a.store) || !aligned(a.k_rows) || !aligned(a.v_rows)) fail("store and rows must be 16-byte aligned");
  const dim3 grid(unsigned(a.n_kv_heads), unsigned(a.rows));
  if (std::int64_t(a.n_kv_heads) * a.rows >= fetch_rows_many_blocks)
    fetch_rows_kernel<64, 16><<<grid, 64, 0, as_stream(s)>>>(a);
  else
    fetch_rows_kernel<256, 8><<<grid, 256, 0, as_stream(s)>>>(a);
  CUDA_CHECK_LAUNCH();
}

void count_hits(const count_hits_args& a, stream_t s) {
  if (a.rows == 0) return;
  if (a.rows < 0 || a.n_kv_heads < 1 || a.k < 1 || a.fetched_stride < 1)
    throw std::invalid_argument("cuda::count_hits: rows >= 0, n_kv_heads, k and fetched_stride >= 1");
  if (!a.needed || !a.needed_count || !a.row_slot || !a.fetched_positions || !a.fetched_count || !a.totals)
    throw std::invalid_argument("cuda::count_hits: every array must be given");
  count_hits_kernel<<<dim3(unsigned(a.n_kv_heads), unsigned(a.rows)), 32, 0, as_stream(s)>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda
