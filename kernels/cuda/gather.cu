// Zero-copy sparse gather: the GPU reads K/V rows directly out of mapped
// pinned host memory. Each thread moves 16-byte chunks; consecutive threads
// take consecutive chunks of a row, so a warp covers two 256-byte rows per
// pass and, with kUnroll loads issued before any store, eight rows are in
// flight per warp: enough outstanding requests to cover the PCIe/C2C latency.
// Adjacent source rows thus become adjacent addresses in one warp's loads,
// which the memory system coalesces.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/gather.hpp"

namespace specpipe::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

template <class Chunk>
__global__ void gather_rows_kernel(const Chunk* __restrict__ src, std::int64_t chunks_per_row,
                                   const std::int64_t* __restrict__ rows,
                                   const std::int64_t* __restrict__ dst_rows, std::int64_t n,
                                   Chunk* __restrict__ dst) {
  const std::int64_t total = n * chunks_per_row;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  std::int64_t idx = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; idx < total; idx += stride * kUnroll) {
    Chunk v[kUnroll];
    std::int64_t out[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
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
    for (int u = 0; u < kUnroll; ++u)
      if (out[u] >= 0) dst[out[u]] = v[u];
  }
}

template <class Chunk>
cudaError_t launch(const void* src, std::size_t row_bytes, const std::int64_t* rows,
                   const std::int64_t* dst_rows, std::int64_t n, void* dst, cudaStream_t stream) {
  const std::int64_t chunks_per_row = std::int64_t(row_bytes / sizeof(Chunk));
  const std::int64_t total = n * chunks_per_row;
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  // Enough blocks to fill every SM several times over, no more than the work.
  std::int64_t blocks = (total + std::int64_t(kThreads) * kUnroll - 1) / (std::int64_t(kThreads) * kUnroll);
  const std::int64_t cap = std::int64_t(sms > 0 ? sms : 1) * 8;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  gather_rows_kernel<Chunk><<<unsigned(blocks), kThreads, 0, stream>>>(
      static_cast<const Chunk*>(src), chunks_per_row, rows, dst_rows, n, static_cast<Chunk*>(dst));
  return cudaGetLastError();
}

bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

}  // namespace

int gather_rows(const void* src, std::size_t row_bytes, const std::int64_t* rows,
                const std::int64_t* dst_rows, std::int64_t n, void* dst, void* stream) {
  if (n <= 0 || row_bytes == 0) return int(cudaSuccess);
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t e;
  if (row_bytes % 16 == 0 && aligned(src, 16) && aligned(dst, 16))
    e = launch<uint4>(src, row_bytes, rows, dst_rows, n, dst, s);
  else if (row_bytes % 4 == 0 && aligned(src, 4) && aligned(dst, 4))
    e = launch<std::uint32_t>(src, row_bytes, rows, dst_rows, n, dst, s);
  else
    e = launch<std::uint8_t>(src, row_bytes, rows, dst_rows, n, dst, s);
  return int(e);
}

}  // namespace specpipe::kernels::cuda
