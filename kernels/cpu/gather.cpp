#include <cstring>

#include "kernels/gather.hpp"

namespace specpipe::kernels {

std::vector<row_run> coalesce_rows(std::span<const std::int64_t> rows) {
  std::vector<row_run> runs;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!runs.empty() && runs.back().src_row + runs.back().count == rows[i]) {
      ++runs.back().count;
    } else {
      runs.push_back({rows[i], std::int64_t(i), 1});
    }
  }
  return runs;
}

gather_plan plan_gather(std::span<const std::int64_t> rows, std::size_t row_bytes,
                        std::size_t min_copy_bytes) {
  gather_plan plan;
  for (const row_run& r : coalesce_rows(rows)) {
    if (std::size_t(r.count) * row_bytes >= min_copy_bytes) {
      plan.copy_runs.push_back(r);
      continue;
    }
    for (std::int64_t j = 0; j < r.count; ++j) {
      plan.kernel_rows.push_back(r.src_row + j);
      plan.kernel_dst.push_back(r.dst_row + j);
    }
  }
  return plan;
}

gather_shape describe_gather(std::span<const std::int64_t> rows, std::size_t row_bytes,
                             std::size_t min_copy_bytes) {
  gather_shape g;
  g.rows = std::int64_t(rows.size());
  for (const row_run& r : coalesce_rows(rows)) {
    ++g.runs;
    if (r.count > g.longest_run) g.longest_run = r.count;
    if (std::size_t(r.count) * row_bytes >= min_copy_bytes) g.rows_in_copy_runs += r.count;
  }
  return g;
}

const char* gather_kernel_name(gather_kernel k) {
  switch (k) {
    case gather_kernel::flat: return "flat";
    case gather_kernel::warp_rows: return "warp-rows";
  }
  return "?";
}

namespace cpu {

void gather_rows(const void* src, std::size_t row_bytes, std::span<const std::int64_t> rows, void* dst) {
  const auto* s = static_cast<const std::byte*>(src);
  auto* d = static_cast<std::byte*>(dst);
  // One memcpy per run of adjacent rows: a sorted top-k set has many, and one
  // long copy streams at memory bandwidth where per-row copies would not.
  std::size_t i = 0;
  while (i < rows.size()) {
    std::size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
    std::memcpy(d + i * row_bytes, s + std::size_t(rows[i]) * row_bytes, (j - i) * row_bytes);
    i = j;
  }
}

}  // namespace cpu
}  // namespace specpipe::kernels
