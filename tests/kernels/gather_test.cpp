// The CPU sparse gather against a naive per-row copy: random indices with
// duplicates, unsorted and sorted runs, first and last rows, odd row sizes,
// sentinels around the output.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kernels/gather.hpp"

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

}  // namespace
}  // namespace specpipe::testing
