#pragma once
// Sparse row gather: copy n rows of `row_bytes` each, picked by row index out
// of a source array, into a dense destination (dst row i = src row rows[i]).
// This is how the transfer engine brings the top-k K/V rows of a step from the
// host KV store to where attention reads them.
//
// Two implementations with one meaning:
//  * cpu::gather_rows, the reference, coalescing runs of adjacent source rows
//    into one memcpy;
//  * cuda::gather_rows (CUDA builds only), a kernel that reads the rows
//    straight out of mapped pinned host memory (zero-copy) with 16-byte loads,
//    plus cudaMemcpyAsync for long contiguous runs; see gather_plan below for
//    how a request is split between them.
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
// contiguous bytes go through cudaMemcpyAsync (a DMA engine moves them at
// full PCIe/NVLink-C2C bandwidth without occupying SMs); everything else goes
// through the zero-copy kernel, whose many 16-byte loads in flight hide the
// latency of small scattered reads that would cost one DMA descriptor each.
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
// sizes fall back to 4-byte, then 1-byte loads.
int gather_rows(const void* src, std::size_t row_bytes, const std::int64_t* rows,
                const std::int64_t* dst_rows, std::int64_t n, void* dst, void* stream);

}  // namespace cuda

}  // namespace specpipe::kernels
