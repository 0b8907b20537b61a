// Zero-copy sparse gather: the GPU reads K/V rows directly out of mapped
// pinned host memory, plus the copy-engine path for long runs. Two kernels
// (kernels/cuda/NOTES.md, "Sparse gather", has the analysis and numbers):
//  * flat (v1): each thread moves 16-byte chunks; consecutive threads take
//    consecutive chunks of a row, so a warp covers two 256-byte rows per pass,
//    with kFlatUnroll loads issued before any store. Grid capped at 8 blocks
//    per SM and at the work, so a 4096-row gather fills only half the SMs.
//  * warp_rows (v2): a persistent grid of blocks_per_sm blocks on every SM;
//    warp w takes tiles of unroll x 32 chunks, tiles dealt round-robin over
//    the blocks first so that even a small gather spreads over all SMs (each
//    SM has its own L1 TLB and its own limit on outstanding misses). All
//    `unroll` loads of a lane are issued before any store. Blocks may be
//    fewer than 8 warps: with 1 block of 1 warp per SM and unroll 2, ~528
//    rows are in flight, against ~67k for 4 blocks of 8 warps at unroll 8.
// Adjacent source rows become adjacent addresses in one warp's loads either
// way, which the memory system merges into full 128-byte requests.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/gather.hpp"

namespace specpipe::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kFlatUnroll = 4;

template <class Chunk>
__global__ void gather_rows_kernel(const Chunk* __restrict__ src, std::int64_t chunks_per_row,
                                   const std::int64_t* __restrict__ rows,
                                   const std::int64_t* __restrict__ dst_rows, std::int64_t n,
                                   Chunk* __restrict__ dst) {
  const std::int64_t total = n * chunks_per_row;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  std::int64_t idx = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; idx < total; idx += stride * kFlatUnroll) {
    Chunk v[kFlatUnroll];
    std::int64_t out[kFlatUnroll];
#pragma unroll
    for (int u = 0; u < kFlatUnroll; ++u) {
      const std::int64_t c = idx + u * stride;
      out[u] = -1;
      if (c < total) {
        const std::int64_t i = c / chunks_per_row;
        const std::int64_t j = c - i * chunks_per_row;
        v[u] = src[rows[i] * chunks_per_row + j];
        out[u] = (dst_rows ? dst_rows[i] : i) * chunks_per_row + j;
      }
    }
#pragma unroll
    for (int u = 0; u < kFlatUnroll; ++u)
      if (out[u] >= 0) dst[out[u]] = v[u];
  }
}

// row_shift >= 0: chunks_per_row is 1 << row_shift (every power-of-two row
// size: 128, 256, 512 bytes), so the chunk -> (row, column) split is a shift.
template <int kUnroll>
__global__ void __launch_bounds__(kThreads)
    gather_warp_rows_kernel(const uint4* __restrict__ src, std::int64_t chunks_per_row, int row_shift,
                            const std::int64_t* __restrict__ rows, const std::int64_t* __restrict__ dst_rows,
                            std::int64_t n, uint4* __restrict__ dst) {
  constexpr int kTile = 32 * kUnroll;
  const int lane = int(threadIdx.x) & 31;
  // Warp numbering across blocks first: tile t runs in block t % gridDim.x.
  const std::int64_t warp = std::int64_t(threadIdx.x >> 5) * gridDim.x + blockIdx.x;
  const std::int64_t warps = std::int64_t(blockDim.x >> 5) * gridDim.x;
  const std::int64_t total = n * chunks_per_row;
  for (std::int64_t base = warp * kTile; base < total; base += warps * kTile) {
    uint4 v[kUnroll];
    std::int64_t out[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t c = base + u * 32 + lane;
      out[u] = -1;
      if (c < total) {
        std::int64_t i, j;
        if (row_shift >= 0) {
          i = c >> row_shift;
          j = c & (chunks_per_row - 1);
        } else {
          i = c / chunks_per_row;
          j = c - i * chunks_per_row;
        }
        // The lanes of one row read the same index: one broadcast load.
        v[u] = __ldg(src + __ldg(rows + i) * chunks_per_row + j);
        out[u] = (dst_rows ? __ldg(dst_rows + i) : i) * chunks_per_row + j;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (out[u] >= 0) dst[out[u]] = v[u];
  }
}

int sm_count() {
  // Cached per device: the attribute query is cheap but sits in every launch.
  static int cache[64] = {};
  int device = 0;
  cudaGetDevice(&device);
  if (device < 0 || device >= 64) device = 0;
  if (cache[device] == 0) {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    cache[device] = sms > 0 ? sms : 1;
  }
  return cache[device];
}

template <class Chunk>
cudaError_t launch_flat(const void* src, std::size_t row_bytes, const std::int64_t* rows,
                        const std::int64_t* dst_rows, std::int64_t n, void* dst, cudaStream_t stream) {
  const std::int64_t chunks_per_row = std::int64_t(row_bytes / sizeof(Chunk));
  const std::int64_t total = n * chunks_per_row;
  // Enough blocks to fill every SM several times over, no more than the work.
  std::int64_t blocks = (total + std::int64_t(kThreads) * kFlatUnroll - 1) / (std::int64_t(kThreads) * kFlatUnroll);
  const std::int64_t cap = std::int64_t(sm_count()) * 8;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  gather_rows_kernel<Chunk><<<unsigned(blocks), kThreads, 0, stream>>>(
      static_cast<const Chunk*>(src), chunks_per_row, rows, dst_rows, n, static_cast<Chunk*>(dst));
  return cudaGetLastError();
}

template <int kUnroll>
void launch_warp_rows_unrolled(unsigned blocks, unsigned threads, const void* src, std::int64_t chunks_per_row, int row_shift,
                               const std::int64_t* rows, const std::int64_t* dst_rows, std::int64_t n, void* dst,
                               cudaStream_t stream) {
  gather_warp_rows_kernel<kUnroll><<<blocks, threads, 0, stream>>>(
      static_cast<const uint4*>(src), chunks_per_row, row_shift, rows, dst_rows, n, static_cast<uint4*>(dst));
}

cudaError_t launch_warp_rows(const void* src, std::size_t row_bytes, const std::int64_t* rows,
                             const std::int64_t* dst_rows, std::int64_t n, void* dst, cudaStream_t stream,
                             const gather_kernel_config& cfg) {
  const std::int64_t chunks_per_row = std::int64_t(row_bytes / 16);
  int row_shift = -1;
  for (int s = 0; s < 62; ++s)
    if ((std::int64_t(1) << s) == chunks_per_row) row_shift = s;
  const int unroll = cfg.unroll <= 2 ? 2 : cfg.unroll <= 4 ? 4 : cfg.unroll <= 8 ? 8 : 16;
  const int per_sm = cfg.blocks_per_sm < 1 ? 1 : cfg.blocks_per_sm > 8 ? 8 : cfg.blocks_per_sm;
  const int warps = cfg.warps_per_block < 1 ? 1 : cfg.warps_per_block > kThreads / 32 ? kThreads / 32 : cfg.warps_per_block;
  // Persistent, but never more blocks than tiles: a block whose warps have no
  // tile would only cost a launch slot.
  const std::int64_t tiles = (n * chunks_per_row + 32 * unroll - 1) / (32 * unroll);
  std::int64_t blocks = std::int64_t(sm_count()) * per_sm;
  if (blocks > tiles) blocks = tiles;
  if (blocks < 1) blocks = 1;
  const auto b = unsigned(blocks);
  const auto t = unsigned(warps * 32);
  switch (unroll) {
    case 2: launch_warp_rows_unrolled<2>(b, t, src, chunks_per_row, row_shift, rows, dst_rows, n, dst, stream); break;
    case 4: launch_warp_rows_unrolled<4>(b, t, src, chunks_per_row, row_shift, rows, dst_rows, n, dst, stream); break;
    case 8: launch_warp_rows_unrolled<8>(b, t, src, chunks_per_row, row_shift, rows, dst_rows, n, dst, stream); break;
    default: launch_warp_rows_unrolled<16>(b, t, src, chunks_per_row, row_shift, rows, dst_rows, n, dst, stream); break;
  }
  return cudaGetLastError();
}

bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

}  // namespace

int gather_rows(const void* src, std::size_t row_bytes, const std::int64_t* rows, const std::int64_t* dst_rows,
                std::int64_t n, void* dst, void* stream, const gather_kernel_config& config) {
  if (n <= 0 || row_bytes == 0) return int(cudaSuccess);
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t e;
  const bool wide = row_bytes % 16 == 0 && aligned(src, 16) && aligned(dst, 16);
  if (wide && config.kernel == gather_kernel::warp_rows)
    e = launch_warp_rows(src, row_bytes, rows, dst_rows, n, dst, s, config);
  else if (wide)
    e = launch_flat<uint4>(src, row_bytes, rows, dst_rows, n, dst, s);
  else if (row_bytes % 4 == 0 && aligned(src, 4) && aligned(dst, 4))
    e = launch_flat<std::uint32_t>(src, row_bytes, rows, dst_rows, n, dst, s);
  else
    e = launch_flat<std::uint8_t>(src, row_bytes, rows, dst_rows, n, dst, s);
  return int(e);
}

int copy_runs_batched(const void* src, std::size_t row_bytes, std::span<const row_run> runs, void* dst,
                      void* stream, copy_batch_scratch& scratch) {
  if (runs.empty() || row_bytes == 0) return int(cudaSuccess);
#if CUDART_VERSION >= 12080
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  scratch.dsts.resize(runs.size());
  scratch.srcs.resize(runs.size());
  scratch.sizes.resize(runs.size());
  for (std::size_t i = 0; i < runs.size(); ++i) {
    scratch.dsts[i] = d + std::size_t(runs[i].dst_row) * row_bytes;
    scratch.srcs[i] = s + std::size_t(runs[i].src_row) * row_bytes;
    scratch.sizes[i] = std::size_t(runs[i].count) * row_bytes;
  }
  // One attribute for every copy: the source is read in stream order (the
  // store's rows may have been written by earlier work on the stream).
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attr.srcLocHint.type = cudaMemLocationTypeHost;
  attr.dstLocHint.type = cudaMemLocationTypeDevice;
  // The API documents no limit on a batch's length; submitting in slices of
  // 4096 keeps any driver-side staging bounded at no measurable cost.
  constexpr std::size_t kSlice = 4096;
  for (std::size_t at = 0; at < runs.size(); at += kSlice) {
    const std::size_t count = runs.size() - at < kSlice ? runs.size() - at : kSlice;
    std::size_t attr_index = 0;
#if CUDART_VERSION >= 13000
    const cudaError_t e = cudaMemcpyBatchAsync(scratch.dsts.data() + at, scratch.srcs.data() + at,
                                               scratch.sizes.data() + at, count, &attr, &attr_index, 1,
                                               static_cast<cudaStream_t>(stream));
#else
    std::size_t fail_index = 0;
    const cudaError_t e = cudaMemcpyBatchAsync(scratch.dsts.data() + at, const_cast<void**>(scratch.srcs.data() + at),
                                               scratch.sizes.data() + at, count, &attr, &attr_index, 1, &fail_index,
                                               static_cast<cudaStream_t>(stream));
#endif
    if (e != cudaSuccess) return int(e);
  }
  return int(cudaSuccess);
#else
  (void)src, (void)dst, (void)stream, (void)scratch;
  return int(cudaErrorNotSupported);
#endif
}

}  // namespace specpipe::kernels::cuda

namespace specpipe::kernels::cuda {

int gather_request(const void* src_host, const void* src_dev, std::size_t row_bytes,
                   std::span<const std::int64_t> rows, void* dst, void* stream, const gather_policy& policy,
                   gather_scratch& scratch) {
  const std::size_t n = rows.size();
  if (n == 0 || row_bytes == 0) return int(cudaSuccess);
  if (scratch.capacity < 2 * n || !scratch.index_host || !scratch.index_dev) return int(cudaErrorInvalidValue);
  auto s = static_cast<cudaStream_t>(stream);
  // One scan: does any run reach the copy threshold?
  const std::size_t min_rows = (policy.min_copy_bytes + row_bytes - 1) / row_bytes;
  bool any_copy = min_rows <= 1;
  for (std::size_t i = 0, run = 1; i < n && !any_copy; ++i) {
    run = i > 0 && rows[i] == rows[i - 1] + 1 ? run + 1 : 1;
    any_copy = run >= min_rows;
  }
  if (!any_copy) {
    std::copy(rows.begin(), rows.end(), scratch.index_host);
    cudaError_t e = cudaMemcpyAsync(scratch.index_dev, scratch.index_host, n * sizeof(std::int64_t),
                                    cudaMemcpyHostToDevice, s);
    if (e != cudaSuccess) return int(e);
    return gather_rows(src_dev, row_bytes, scratch.index_dev, nullptr, std::int64_t(n), dst, stream, policy.kernel);
  }
  const gather_plan plan = plan_gather(rows, row_bytes, policy.min_copy_bytes);
  if (policy.copy_batch) {
    if (const int e = copy_runs_batched(src_host, row_bytes, plan.copy_runs, dst, stream, scratch.copies); e != 0)
      return e;
  } else {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* h = static_cast<const unsigned char*>(src_host);
    for (const row_run& r : plan.copy_runs) {
      const cudaError_t e = cudaMemcpyAsync(d + std::size_t(r.dst_row) * row_bytes, h + std::size_t(r.src_row) * row_bytes,
                                            std::size_t(r.count) * row_bytes, cudaMemcpyHostToDevice, s);
      if (e != cudaSuccess) return int(e);
    }
  }
  const std::size_t k = plan.kernel_rows.size();
  if (k == 0) return int(cudaSuccess);
  std::copy(plan.kernel_rows.begin(), plan.kernel_rows.end(), scratch.index_host);
  std::copy(plan.kernel_dst.begin(), plan.kernel_dst.end(), scratch.index_host + k);
  const cudaError_t e = cudaMemcpyAsync(scratch.index_dev, scratch.index_host, 2 * k * sizeof(std::int64_t),
                                        cudaMemcpyHostToDevice, s);
  if (e != cudaSuccess) return int(e);
  return gather_rows(src_dev, row_bytes, scratch.index_dev, scratch.index_dev + k, std::int64_t(k), dst, stream,
                     policy.kernel);
}

}  // namespace specpipe::kernels::cuda
