#include "kernels/gather_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "kernels/gather.hpp"
#include "memory/allocator.hpp"

namespace specpipe::kernels {

#ifdef SPECPIPE_HAVE_CUDA
// kernels/cuda/gather_bench_cuda.cpp
std::vector<gather_bench_result> run_gather_bench_cuda(const gather_bench_options& opts);
#endif

namespace {

std::vector<std::int64_t> random_rows(std::int64_t n, std::int64_t store_rows, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> pick(0, store_rows - 1);
  std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
  for (auto& r : rows) r = pick(rng);
  return rows;
}

}  // namespace

std::vector<gather_bench_result> run_gather_bench(const gather_bench_options& opts) {
  std::vector<gather_bench_result> out;
  if (opts.cpu) {
    const std::int64_t store_rows = std::int64_t(opts.store_bytes / opts.row_bytes);
    buffer store(host_allocator(), std::size_t(store_rows) * opts.row_bytes);
    // Touch every page so the first timed run does not pay for page faults.
    std::memset(store.data(), 0x5a, store.size());
    for (const std::int64_t n : opts.row_counts) {
      const auto rows = random_rows(n, store_rows, opts.seed);
      buffer dst(host_allocator(), std::size_t(n) * opts.row_bytes);
      double best = 1e30;
      for (int it = 0; it < std::max(1, opts.iterations); ++it) {
        const auto t0 = std::chrono::steady_clock::now();
        cpu::gather_rows(store.data(), opts.row_bytes, rows, dst.data());
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      gather_bench_result r;
      r.backend = "cpu";
      r.rows = n;
      r.row_bytes = opts.row_bytes;
      r.seconds = best;
      r.gb_per_s = double(n) * double(opts.row_bytes) / best / 1e9;
      r.matches_reference = true;
      r.note = "one thread, memcpy per run of adjacent rows";
      out.push_back(r);
    }
  }
  if (opts.gpu) {
#ifdef SPECPIPE_HAVE_CUDA
    if (cuda_available()) {
      auto gpu = run_gather_bench_cuda(opts);
      out.insert(out.end(), gpu.begin(), gpu.end());
    } else {
      out.push_back({"cuda-zero-copy", 0, opts.row_bytes, 0, 0, false, "skipped: no CUDA device visible"});
    }
#else
    out.push_back({"cuda-zero-copy", 0, opts.row_bytes, 0, 0, false,
                   "skipped: built without the CUDA backend"});
#endif
  }
  return out;
}

}  // namespace specpipe::kernels
