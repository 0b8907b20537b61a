#include "kernels/gather_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "kernels/gather.hpp"

namespace specpipe::kernels {

#ifdef SPECPIPE_HAVE_CUDA
// kernels/cuda/gather_bench_cuda.cpp
gather_bench_report run_gather_bench_cuda(const gather_bench_options& opts);
#endif

const char* gather_pattern_name(gather_pattern p) {
  switch (p) {
    case gather_pattern::uniform: return "uniform";
    case gather_pattern::uniform_sorted: return "uniform-sorted";
    case gather_pattern::topk: return "topk";
    case gather_pattern::topk_clustered: return "topk-clustered";
  }
  return "?";
}

std::vector<std::int64_t> gather_bench_rows(gather_pattern pattern, std::int64_t n, std::int64_t store_rows,
                                            const gather_bench_options& opts, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> rows;
  rows.reserve(std::size_t(n));
  if (pattern == gather_pattern::uniform || pattern == gather_pattern::uniform_sorted) {
    std::uniform_int_distribution<std::int64_t> pick(0, store_rows - 1);
    for (std::int64_t i = 0; i < n; ++i) rows.push_back(pick(rng));
    if (pattern == gather_pattern::uniform_sorted) std::sort(rows.begin(), rows.end());
    return rows;
  }
  const std::int64_t bt = std::max<std::int64_t>(1, opts.block_tokens);
  const std::int64_t k = std::max<std::int64_t>(1, opts.topk);
  const std::int64_t streams = std::max<std::int64_t>(1, (n + k - 1) / k);
  // Each stream's context: an equal share of the store, in whole blocks.
  const std::int64_t context = std::max<std::int64_t>(bt, store_rows / streams / bt * bt);
  const std::int64_t per_stream = std::min(k, context);
  std::vector<std::int64_t> pos;
  for (std::int64_t s = 0; s < streams && std::int64_t(rows.size()) < n; ++s) {
    const std::int64_t want = std::min(per_stream, n - std::int64_t(rows.size()));
    pos.clear();
    std::uniform_int_distribution<std::int64_t> at(0, context - 1);
    if (pattern == gather_pattern::topk) {
      while (std::int64_t(pos.size()) < want) {
        pos.push_back(at(rng));
        if (std::int64_t(pos.size()) == want) {
          std::sort(pos.begin(), pos.end());
          pos.erase(std::unique(pos.begin(), pos.end()), pos.end());
        }
      }
    } else {
      // Clusters: a uniform start and a geometric length (mean cluster_rows).
      std::geometric_distribution<std::int64_t> extra(1.0 / std::max(1.0, opts.cluster_rows));
      while (std::int64_t(pos.size()) < want) {
        const std::int64_t start = at(rng), len = 1 + extra(rng);
        for (std::int64_t j = 0; j < len && start + j < context && std::int64_t(pos.size()) < want; ++j)
          pos.push_back(start + j);
        if (std::int64_t(pos.size()) == want) {
          std::sort(pos.begin(), pos.end());
          pos.erase(std::unique(pos.begin(), pos.end()), pos.end());
        }
      }
    }
    // Position -> arena row, as kv_block_table lays out a fresh store:
    // block b of stream s is arena block b * streams + s.
    for (const std::int64_t p : pos) rows.push_back(((p / bt) * streams + s) * bt + p % bt);
  }
  for (auto& r : rows) r %= store_rows;  // only when n / topk streams overfill a tiny store
  return rows;
}

namespace {

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  if (!f || !std::getline(f, line)) return "?";
  return line;
}

}  // namespace

std::string gather_host_setup() {
  std::ostringstream o;
  o << "host pages: THP " << read_first_line("/sys/kernel/mm/transparent_hugepage/enabled");
  {
    std::ifstream f("/proc/meminfo");
    std::string key;
    long long value = 0;
    std::string unit;
    while (f >> key >> value) {
      std::getline(f, unit);
      if (key == "HugePages_Total:" || key == "HugePages_Free:") o << ", " << key << " " << value;
    }
  }
  std::error_code ec;
  std::size_t groups = 0;
  for (auto it = std::filesystem::directory_iterator("/sys/kernel/iommu_groups", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++groups;
  o << "; IOMMU groups " << groups;
  std::string cmdline = read_first_line("/proc/cmdline"), flags;
  std::istringstream words(cmdline);
  for (std::string w; words >> w;)
    if (w.find("iommu") != std::string::npos || w.find("hugepage") != std::string::npos) flags += " " + w;
  o << ", kernel flags:" << (flags.empty() ? " (none about iommu/hugepages)" : flags);
  return o.str();
}

gather_bench_report run_gather_bench(const gather_bench_options& opts) {
  gather_bench_report out;
  if (opts.cpu) {
    const std::int64_t store_rows = std::int64_t(opts.store_bytes / opts.row_bytes);
    buffer store(host_allocator(), std::size_t(store_rows) * opts.row_bytes);
    // Touch every page so the first timed run does not pay for page faults.
    std::memset(store.data(), 0x5a, store.size());
    for (const gather_pattern pattern : opts.patterns)
      for (const std::int64_t n : opts.row_counts) {
        const auto rows = gather_bench_rows(pattern, n, store_rows, opts, opts.seed);
        buffer dst(host_allocator(), std::size_t(n) * opts.row_bytes);
        double best = 1e30;
        for (int it = 0; it < std::max(1, opts.iterations); ++it) {
          const auto t0 = std::chrono::steady_clock::now();
          cpu::gather_rows(store.data(), opts.row_bytes, rows, dst.data());
          best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        gather_bench_result r;
        r.backend = "cpu";
        r.pattern = gather_pattern_name(pattern);
        r.arena = "host";
        r.rows = n;
        r.row_bytes = opts.row_bytes;
        r.seconds = best;
        r.gb_per_s = double(n) * double(opts.row_bytes) / best / 1e9;
        r.runs = double(coalesce_rows(rows).size());
        r.matches_reference = true;
        r.note = "one thread, memcpy per run of adjacent rows";
        out.results.push_back(r);
      }
  }
  if (opts.gpu) {
    gather_bench_result skip;
    skip.backend = "cuda";
    skip.row_bytes = opts.row_bytes;
#ifdef SPECPIPE_HAVE_CUDA
    if (cuda_available()) {
      auto gpu = run_gather_bench_cuda(opts);
      out.results.insert(out.results.end(), gpu.results.begin(), gpu.results.end());
      out.notes.insert(out.notes.end(), gpu.notes.begin(), gpu.notes.end());
    } else {
      skip.note = "skipped: no CUDA device visible";
      out.results.push_back(skip);
    }
#else
    skip.note = "skipped: built without the CUDA backend";
    out.results.push_back(skip);
#endif
  }
  return out;
}

}  // namespace specpipe::kernels
