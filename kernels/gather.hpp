#pragma once
// Sparse row gather: copy n rows of `row_bytes` each, picked by row index out
// of a source array, into a dense destination (dst row i = src row rows[i]).
// This is how the transfer engine brings the top-k K/V rows of a step from the
// host KV store to where attention reads them.
//
// Two implementations with one meaning:
//  * cpu::gather_rows, the reference, coalescing runs of adjacent source rows
//    into one memcpy;
//  * cuda::gather_rows (CUDA builds only), kernels that read the rows
//    straight out of mapped pinned host memory (zero-copy) with 16-byte loads,
//    plus cuda::copy_runs_batched (the copy engines) for long contiguous runs;
//    see gather_plan and gather_policy below for how a request is split.
// Entry points take raw pointers and an explicit stream and never allocate.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace specpipe::kernels {

// A run of rows that are adjacent both in the source and in the destination:
// src rows [src_row, src_row + count) go to dst rows [dst_row, dst_row + count).
struct row_run {
  std::int64_t src_row = 0;
  std::int64_t dst_row = 0;
  std::int64_t count = 0;
};

// Splits `rows` (in destination order) into maximal runs of consecutive
// source rows. Duplicates and unsorted indices simply break runs.
std::vector<row_run> coalesce_rows(std::span<const std::int64_t> rows);

// How a gather is executed on a GPU. Runs of at least `min_copy_bytes`
// contiguous bytes go through the copy engines (cudaMemcpyBatchAsync: DMA
// moves them at full link bandwidth without occupying SMs); everything else
// goes through the zero-copy kernel, whose many 16-byte loads in flight hide
// the latency of small scattered reads that would cost one DMA descriptor each.
struct gather_plan {
  std::vector<row_run> copy_runs;          // large contiguous runs
  std::vector<std::int64_t> kernel_rows;   // src row per kernel-gathered row
  std::vector<std::int64_t> kernel_dst;    // dst row per kernel-gathered row
};

// The rule: a run is copied when run_bytes >= min_copy_bytes. Submitting one
// cudaMemcpyAsync costs a few microseconds; at ~50 GB/s a 1 MiB run takes
// ~20 us, so from there on the fixed cost stays under ~10% and the copy leaves
// the SMs free. Shorter runs ride in the one kernel launch of the request.
inline constexpr std::size_t default_min_copy_bytes = std::size_t(1) << 20;
gather_plan plan_gather(std::span<const std::int64_t> rows, std::size_t row_bytes,
                        std::size_t min_copy_bytes = default_min_copy_bytes);

// The zero-copy kernels (kernels/cuda/NOTES.md, "Sparse gather", says why
// each exists and what it was expected to do).
enum class gather_kernel : std::uint8_t {
  flat,       // v1: one thread per 16-byte chunk, grid-stride, 4 loads in
              // flight per thread, grid capped at 8 blocks per SM
  warp_rows,  // v2: persistent warps, each taking `unroll` x 32 chunks (for
              // 256-byte rows, 2 x unroll whole rows) per step, every load
              // issued before any store; row indices read once per row
};

const char* gather_kernel_name(gather_kernel k);

struct gather_kernel_config {
  gather_kernel kernel = gather_kernel::warp_rows;
  int unroll = 8;         // warp_rows: 16-byte loads in flight per lane (1..16)
  int blocks_per_sm = 4;  // warp_rows: persistent blocks per SM (1..8)
  int warps_per_block = 8;  // warp_rows: 1..8 (256 threads). Rows in flight are
                            // SMs x blocks x warps x 2 x unroll (256-byte rows):
                            // fewer than the default's 67k is how the bench asks
                            // whether concurrent reads to the host cost latency.
};

// How the transfer engine runs one request: the split between copy engines
// and kernel (plan_gather's rule with this threshold), and the kernel's shape.
// `copy_batch` sends all copy runs in one cudaMemcpyBatchAsync instead of one
// cudaMemcpyAsync each.
struct gather_policy {
  std::size_t min_copy_bytes = default_min_copy_bytes;
  bool copy_batch = true;
  gather_kernel_config kernel{};
};

// Statistics of a request's rows, for choosing how to run it and for the
// benchmark's notes.
struct gather_shape {
  std::int64_t rows = 0;
  std::int64_t runs = 0;           // maximal runs of consecutive source rows
  std::int64_t longest_run = 0;    // in rows
  std::int64_t rows_in_copy_runs = 0;  // rows in runs of >= min_copy_bytes
};
gather_shape describe_gather(std::span<const std::int64_t> rows, std::size_t row_bytes,
                             std::size_t min_copy_bytes = default_min_copy_bytes);

namespace cpu {

// dst[i * row_bytes ...] = src[rows[i] * row_bytes ...] for i < rows.size().
// Rows must be valid for src; src and dst must not overlap.
void gather_rows(const void* src, std::size_t row_bytes, std::span<const std::int64_t> rows, void* dst);

}  // namespace cpu

namespace cuda {

// CUDA builds only (SPECPIPE_HAVE_CUDA). All pointers are device-accessible:
// `src` is the device alias of mapped pinned host memory
// (cudaHostGetDevicePointer) or device memory, `rows` and `dst_rows` live in
// device memory (dst_rows may be null: dst row i = i). `dst` is device memory.
// Runs on `stream` (a cudaStream_t); returns 0 or the cudaError_t value.
// Fast path when row_bytes and both base pointers are 16-byte aligned; other
// sizes fall back to the flat kernel with 4-byte, then 1-byte loads.
int gather_rows(const void* src, std::size_t row_bytes, const std::int64_t* rows,
                const std::int64_t* dst_rows, std::int64_t n, void* dst, void* stream,
                const gather_kernel_config& config = {});

// Host arrays for copy_runs_batched, owned and reused by the caller so the
// copy path allocates nothing once they have grown.
struct copy_batch_scratch {
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::vector<std::size_t> sizes;
};

// Copies each run (src rows [src_row, +count) of the host array `src` to dst
// rows [dst_row, +count) of device memory `dst`) with the copy engines, all in
// one cudaMemcpyBatchAsync on `stream` (which must not be the legacy default
// stream). `src` is the host pointer of pinned memory. Returns 0 or the
// cudaError_t value.
int copy_runs_batched(const void* src, std::size_t row_bytes, std::span<const row_run> runs, void* dst,
                      void* stream, copy_batch_scratch& scratch);

// Caller-owned scratch of gather_request: pinned host staging and device
// memory for index lists (`capacity` int64 entries each), and the batch-copy
// arrays. The staging is read by the stream after gather_request returns, so
// it must not be rewritten before the stream has passed the request (the
// transfer engine waits on each request's event; back-to-back callers keep
// one scratch per request in flight).
struct gather_scratch {
  std::int64_t* index_host = nullptr;
  std::int64_t* index_dev = nullptr;
  std::size_t capacity = 0;
  copy_batch_scratch copies;
};

// One request the way the transfer engine runs it: runs of at least
// policy.min_copy_bytes go to the copy engines (one batch, or one
// cudaMemcpyAsync each), the other rows to the zero-copy kernel after their
// index lists are uploaded on the same stream. When no run qualifies (the
// common case: the store's blocks cap runs at block_tokens rows) the rows are
// uploaded as they are and the planning costs one scan. `src_host` is the
// pinned host pointer, `src_dev` its device alias. Returns 0, the
// cudaError_t value, or cudaErrorInvalidValue when scratch.capacity is below
// 2 * rows.size().
int gather_request(const void* src_host, const void* src_dev, std::size_t row_bytes,
                   std::span<const std::int64_t> rows, void* dst, void* stream, const gather_policy& policy,
                   gather_scratch& scratch);

}  // namespace cuda

}  // namespace specpipe::kernels
