#include "kernels/fetch_rows.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace specpipe::kernels::cpu {

void fetch_rows(const fetch_rows_args& a) {
  if (!a.topk_positions || !a.topk_count || !a.row_slot || !a.store || !a.positions || !a.count || !a.k_rows ||
      !a.v_rows)
    throw std::invalid_argument("fetch_rows: every array must be given");
  if (a.k < 1 || a.store_tokens < 1 || a.n_kv_heads < 1 || a.head_dim < 1)
    throw std::invalid_argument("fetch_rows: k, store_tokens, n_kv_heads and head_dim must be >= 1");
  const std::int64_t d = a.head_dim, nkv = a.n_kv_heads;
  std::vector<std::int32_t> sorted;
  for (int r = 0; r < a.rows; ++r) {
    const std::int64_t s = a.row_slot[r];
    for (std::int64_t h = 0; h < nkv; ++h) {
      const std::int32_t n = a.topk_count[r * nkv + h];
      if (n < 0 || n > a.k)
        throw std::invalid_argument("fetch_rows: row " + std::to_string(r) + " head " + std::to_string(h) +
                                    " has count " + std::to_string(n) + ", outside [0, k]");
      const std::int32_t* in = a.topk_positions + (r * nkv + h) * a.k;
      sorted.assign(in, in + n);
      std::sort(sorted.begin(), sorted.end());
      const std::int64_t dst = (s * nkv + h) * a.k;
      a.count[s * nkv + h] = n;
      for (std::int32_t i = 0; i < n; ++i) {
        const std::int64_t p = sorted[std::size_t(i)];
        if (p < 0) throw std::invalid_argument("fetch_rows: negative position " + std::to_string(p));
        const std::uint16_t* row = a.store + ((s * nkv + h) * a.store_tokens + p % a.store_tokens) * 2 * d;
        a.positions[dst + i] = std::int32_t(p);
        std::memcpy(a.k_rows + (dst + i) * d, row, std::size_t(d) * 2);
        std::memcpy(a.v_rows + (dst + i) * d, row + d, std::size_t(d) * 2);
      }
    }
  }
}

void count_hits(const count_hits_args& a) {
  if (!a.needed || !a.needed_count || !a.row_slot || !a.fetched_positions || !a.fetched_count || !a.totals)
    throw std::invalid_argument("count_hits: every array must be given");
  const std::int64_t nkv = a.n_kv_heads;
  for (int r = 0; r < a.rows; ++r)
    for (std::int64_t h = 0; h < nkv; ++h) {
      const std::int64_t s = a.row_slot[r];
      const std::int32_t* f = a.fetched_positions + (s * nkv + h) * a.fetched_stride;
      const std::int32_t nf = a.fetched_count[s * nkv + h];
      const std::int32_t n = a.needed_count[r * nkv + h];
      a.totals[0] += std::uint64_t(n);
      for (std::int32_t i = 0; i < n; ++i)
        if (std::binary_search(f, f + nf, a.needed[(r * nkv + h) * a.k + i])) ++a.totals[1];
    }
}

}  // namespace specpipe::kernels::cpu
