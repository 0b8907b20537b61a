// The CPU sparse gather against a naive per-row copy: random indices with
// duplicates, unsorted and sorted runs, first and last rows, odd row sizes,
// sentinels around the output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "kernels/gather.hpp"
#include "kernels/gather_bench.hpp"

namespace specpipe::testing {
namespace {

std::vector<std::int64_t> random_rows(std::mt19937_64& rng, std::int64_t store_rows, std::size_t n) {
  std::uniform_int_distribution<std::int64_t> pick(0, store_rows - 1);
  std::vector<std::int64_t> rows(n);
  for (auto& r : rows) r = pick(rng);
  rows.front() = 0;
  rows.back() = store_rows - 1;
  if (n > 4) rows[n / 2] = rows[n / 2 - 1];  // a duplicate
  if (n > 8)
    for (std::size_t i = 3; i < 7; ++i) rows[i] = std::min(store_rows - 1, rows[2] + std::int64_t(i) - 2);  // a run
  return rows;
}

TEST(CpuGather, MatchesPerRowCopies) {
  for (const std::size_t row_bytes : {std::size_t(1), std::size_t(6), std::size_t(256), std::size_t(260)}) {
    const std::uint64_t seed = 42 + row_bytes;
    std::mt19937_64 rng(seed);
    const std::int64_t store_rows = 1000;
    std::vector<unsigned char> store(std::size_t(store_rows) * row_bytes);
    for (auto& b : store) b = static_cast<unsigned char>(rng());
    const auto rows = random_rows(rng, store_rows, 333);
    constexpr std::size_t pad = 64;
    std::vector<unsigned char> got(rows.size() * row_bytes + 2 * pad, 0xEE), want(rows.size() * row_bytes);
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::memcpy(&want[i * row_bytes], &store[std::size_t(rows[i]) * row_bytes], row_bytes);
    kernels::cpu::gather_rows(store.data(), row_bytes, rows, got.data() + pad);
    EXPECT_EQ(0, std::memcmp(got.data() + pad, want.data(), want.size())) << "seed " << seed << " row_bytes " << row_bytes;
    for (std::size_t i = 0; i < pad; ++i) {
      ASSERT_EQ(got[i], 0xEE) << "wrote before the output, seed " << seed;
      ASSERT_EQ(got[got.size() - 1 - i], 0xEE) << "wrote past the output, seed " << seed;
    }
  }
}

TEST(CpuGather, EmptyGatherTouchesNothing) {
  unsigned char dst[4] = {1, 2, 3, 4};
  kernels::cpu::gather_rows(nullptr, 16, {}, dst);
  EXPECT_EQ(dst[0], 1);
}

TEST(GatherPlan, CoalescesRunsAndSplitsByTheCopyRule) {
  const std::vector<std::int64_t> rows{5, 6, 7, 2, 2, 9, 10, 0};
  const auto runs = kernels::coalesce_rows(rows);
  ASSERT_EQ(runs.size(), 5u);
  EXPECT_EQ(runs[0].src_row, 5);
  EXPECT_EQ(runs[0].count, 3);
  EXPECT_EQ(runs[1].dst_row, 3);
  EXPECT_EQ(runs[2].count, 1);  // the duplicate is a new run
  EXPECT_EQ(runs[3].src_row, 9);
  EXPECT_EQ(runs[3].count, 2);
  // With 256-byte rows and a 512-byte copy threshold, runs of >= 2 rows are copied.
  const auto plan = kernels::plan_gather(rows, 256, 512);
  ASSERT_EQ(plan.copy_runs.size(), 2u);
  EXPECT_EQ(plan.kernel_rows, (std::vector<std::int64_t>{2, 2, 0}));
  EXPECT_EQ(plan.kernel_dst, (std::vector<std::int64_t>{3, 4, 7}));
  const auto all_kernel = kernels::plan_gather(rows, 256);
  EXPECT_TRUE(all_kernel.copy_runs.empty());
  EXPECT_EQ(all_kernel.kernel_rows.size(), rows.size());
}

TEST(GatherPlan, DescribesRunsAndCopyRows) {
  const std::vector<std::int64_t> rows{5, 6, 7, 2, 2, 9, 10, 0};
  const auto g = kernels::describe_gather(rows, 256, 512);
  EXPECT_EQ(g.rows, 8);
  EXPECT_EQ(g.runs, 5);
  EXPECT_EQ(g.longest_run, 3);
  EXPECT_EQ(g.rows_in_copy_runs, 5);  // the runs 5..7 and 9..10
}

TEST(GatherBenchRows, PatternsHaveTheShapeTheyClaim) {
  kernels::gather_bench_options o;
  o.topk = 64;
  o.block_tokens = 16;
  const std::int64_t store_rows = std::int64_t(1) << 20, n = 4096;
  const std::uint64_t seed = 5;
  const auto uniform = kernels::gather_bench_rows(kernels::gather_pattern::uniform, n, store_rows, o, seed);
  auto sorted = kernels::gather_bench_rows(kernels::gather_pattern::uniform_sorted, n, store_rows, o, seed);
  ASSERT_EQ(std::int64_t(uniform.size()), n);
  EXPECT_TRUE(std::is_sorted(sorted.begin(), sorted.end()));
  auto resorted = uniform;
  std::sort(resorted.begin(), resorted.end());
  EXPECT_EQ(resorted, sorted) << "seed " << seed;
  const std::int64_t streams = n / o.topk, context = store_rows / streams;
  for (const auto p : {kernels::gather_pattern::topk, kernels::gather_pattern::topk_clustered}) {
    const auto rows = kernels::gather_bench_rows(p, n, store_rows, o, seed);
    ASSERT_EQ(std::int64_t(rows.size()), n) << kernels::gather_pattern_name(p);
    for (std::int64_t s = 0; s < streams; ++s) {
      std::int64_t last_pos = -1;
      for (std::int64_t i = 0; i < o.topk; ++i) {
        const std::int64_t r = rows[std::size_t(s * o.topk + i)];
        ASSERT_GE(r, 0);
        ASSERT_LT(r, store_rows);
        // Invert the fresh block table's layout: block b of stream s is
        // arena block b * streams + s.
        const std::int64_t block = r / o.block_tokens;
        ASSERT_EQ(block % streams, s) << kernels::gather_pattern_name(p) << " row " << r << ", seed " << seed;
        const std::int64_t pos = block / streams * o.block_tokens + r % o.block_tokens;
        ASSERT_LT(pos, context);
        ASSERT_GT(pos, last_pos) << "positions of a stream ascend and are distinct, seed " << seed;
        last_pos = pos;
      }
    }
  }
  // Clusters make runs of adjacent rows: far fewer runs than rows.
  const auto clustered = kernels::gather_bench_rows(kernels::gather_pattern::topk_clustered, n, store_rows, o, seed);
  const auto plain = kernels::gather_bench_rows(kernels::gather_pattern::topk, n, store_rows, o, seed);
  EXPECT_LT(kernels::coalesce_rows(clustered).size(), std::size_t(n) / 2);
  EXPECT_GT(kernels::coalesce_rows(plain).size(), std::size_t(n) * 9 / 10);
}

}  // namespace
}  // namespace specpipe::testing
