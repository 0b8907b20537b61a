#pragma once
// The `gather` case of the kernel benchmarks: rows out of a large host store,
// on the CPU reference and (when a GPU is present) every GPU path: the
// zero-copy kernels in their shapes, the copy engines, and the engine's own
// per-request choice, for several row patterns and arena page sizes, beside a
// dense pinned copy of the same arena in the same run. Plain data in and out
// so `specpipe bench --kernels` can print and store it. Target on an H200:
// >= 45 GB/s for 4096 and 65536 random 256-byte rows from a multi-GiB store.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "memory/allocator.hpp"

namespace specpipe::kernels {

// Which rows a gather asks for.
enum class gather_pattern : std::uint8_t {
  uniform,          // uniform over the whole store, unsorted, duplicates
                    // possible: the case, every row on its own page
  uniform_sorted,   // the same rows sorted ascending: what ordering alone buys
  topk,             // the planner's shape: n / topk streams (layer, head), each
                    // asking for topk distinct positions, ascending, drawn
                    // uniformly from its context; a stream's positions live in
                    // blocks of block_tokens rows laid out as a fresh
                    // kv_block_table lays them (block k of stream s is arena
                    // block k * streams + s)
  topk_clustered,   // as topk, but the positions come in clusters of
                    // geometric length (mean `cluster_rows`): attention's
                    // neighbouring-token locality, so runs of adjacent rows
};

const char* gather_pattern_name(gather_pattern p);

struct gather_bench_options {
  std::size_t store_bytes = std::size_t(4) << 30;  // the host store the rows come from
  std::size_t row_bytes = 256;                     // one K|V row of one (layer, head)
  std::vector<std::int64_t> row_counts{4096, 65536};
  std::vector<gather_pattern> patterns{gather_pattern::uniform, gather_pattern::uniform_sorted, gather_pattern::topk,
                                       gather_pattern::topk_clustered};
  // Arenas tried in turn (GPU only; the CPU half uses plain host memory). A
  // huge-page arena the host cannot back is reported and skipped.
  std::vector<pinned_pages> arenas{pinned_pages::driver, pinned_pages::transparent, pinned_pages::hugetlb,
                                   pinned_pages::pool};
  std::int64_t topk = 64;          // rows per stream (topk patterns)
  std::int64_t block_tokens = 16;  // rows per store block (topk patterns)
  double cluster_rows = 4;         // mean cluster length (topk_clustered)
  int index_sets = 8;  // different row sets per timed pass, gathered back to back
  // At least this many bytes of rows over all sets (more sets when needed):
  // fewer, cycled, stay in the host CPU's last-level cache, and a PCIe read
  // served from there is far quicker than one from DRAM (NOTES.md, "Sparse
  // gather"). The first index_sets sets alone give the warm figure.
  std::size_t cold_bytes = std::size_t(1) << 30;
  int passes = 3;      // timed passes over the sets (median reported)
  int host_threads = 0;  // host-gather: CPU threads (0: all cores)
  int iterations = 20;  // CPU half: repeats (best reported)
  std::uint64_t seed = 1;
  bool cpu = true;
  bool gpu = true;  // skipped with a note when no GPU is present
};

struct gather_bench_result {
  std::string backend;      // "cpu", a GPU method ("flat", "warp-rows u8 b4", "copy-batch", "engine", ...) or
                            // "dense-pinned-copy"
  std::string pattern;      // gather_pattern_name, "" for the dense copy
  std::string arena;        // pinned_pages_name, "host" for the CPU half
  std::int64_t rows = 0;
  std::size_t row_bytes = 0;
  double seconds = 0;       // per gather: GPU, the median pass of index_sets back-to-back gathers over the sets;
                            // CPU, best of the iterations
  double single_seconds = 0;  // GPU: one gather alone, launch latency included (median of 3)
  double warm_seconds = 0;    // GPU: per gather over the first index_sets sets only, cycled (LLC-warm rows)
  double gb_per_s = 0;      // rows * row_bytes / seconds / 1e9
  double runs = 0;          // mean runs of adjacent rows per gather
  bool matches_reference = false;  // output checked against cpu::gather_rows
  std::string note;         // why a case was skipped, or other remarks
};

struct gather_bench_report {
  std::vector<gather_bench_result> results;
  std::vector<std::string> notes;  // the host's page and IOMMU setup, what each arena got
};

// The rows of one gather of `n` rows from a store of `store_rows` rows.
std::vector<std::int64_t> gather_bench_rows(gather_pattern pattern, std::int64_t n, std::int64_t store_rows,
                                            const gather_bench_options& opts, std::uint64_t seed);

// What the host says about huge pages and the IOMMU (Linux procfs/sysfs),
// one line, for the benchmark's notes.
std::string gather_host_setup();

gather_bench_report run_gather_bench(const gather_bench_options& opts);

}  // namespace specpipe::kernels
