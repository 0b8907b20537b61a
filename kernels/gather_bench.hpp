#pragma once
// The `gather` case of the kernel benchmarks: random rows out of a large host
// store, on the CPU reference and (when a GPU is present) the zero-copy CUDA
// kernel. Plain data in and out so `specpipe bench --kernels` can print and
// store it. Target on an H200: >= 45 GB/s for 4096 and 65536 random 256-byte
// rows from a multi-GiB store.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace specpipe::kernels {

struct gather_bench_options {
  std::size_t store_bytes = std::size_t(4) << 30;  // the host store the rows come from
  std::size_t row_bytes = 256;                     // one K|V row of one (layer, head)
  std::vector<std::int64_t> row_counts{4096, 65536};
  int iterations = 20;
  std::uint64_t seed = 1;
  bool cpu = true;
  bool gpu = true;  // skipped with a note when no GPU is present
};

struct gather_bench_result {
  std::string backend;      // "cpu" or "cuda-zero-copy"
  std::int64_t rows = 0;
  std::size_t row_bytes = 0;
  double seconds = 0;       // per gather, best of the iterations
  double gb_per_s = 0;      // rows * row_bytes / seconds / 1e9
  bool matches_reference = false;  // output checked against cpu::gather_rows
  std::string note;         // why a case was skipped, or other remarks
};

std::vector<gather_bench_result> run_gather_bench(const gather_bench_options& opts);

}  // namespace specpipe::kernels
