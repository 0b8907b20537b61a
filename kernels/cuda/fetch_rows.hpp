#pragma once
// SpeCache's fetch on the GPU: the CUDA twin of kernels::cpu::fetch_rows
// (kernels/fetch_rows.hpp). One block per (KV head, planner row): the block
// ranks its top-k positions in shared memory (ascending, as the mixed
// attention reads them), then its threads copy the rows with 16-byte loads
// from the store (the device alias of mapped pinned host memory: zero-copy
// reads over the link), every load of a pass issued before any store so that
// many reads are in flight per thread.
#include "kernels/cuda/cuda_error.hpp"
#include "kernels/fetch_rows.hpp"

namespace specpipe::kernels::cuda {

// Validates (std::invalid_argument naming the field: head_dim a multiple of
// 8, k at most 1024, 16-byte aligned store and rows) and launches on `s`.
void fetch_rows(const fetch_rows_args& a, stream_t s);

// From this many (row, KV head) blocks on, fetch_rows launches blocks of 64
// threads (16 loads each) instead of 256 (8 each): the same bytes in flight
// per block with a quarter of the warps.
constexpr int fetch_rows_many_blocks = 256;

// The twin of kernels::cpu::count_hits: one warp per (row, KV head), a
// binary search per needed position, one atomic add per warp.
void count_hits(const count_hits_args& a, stream_t s);

}  // namespace specpipe::kernels::cuda
