// CUDA fetch of SpeCache's top-k rows (kernels/cuda/fetch_rows.hpp) against
// cpu::fetch_rows on fresh random inputs: the store in mapped pinned host
// memory (as the runtime keeps it), random distinct positions in random
// order, counts from 0 to k, planner rows writing to scattered slots, k up
// to the kernel's 1024, head_dim 64 and 128, aliasing modulo store_tokens;
// outputs poisoned first, so entries past the counts and slots nobody
// fetches must come back untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_test_util.hpp"
#include "kernels/fetch_rows.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/fetch_rows.hpp"
#endif

namespace specpipe::test {
namespace {

class cuda_fetch_rows : public cuda_test {};

#ifdef SPECPIPE_HAVE_CUDA
namespace kc = kernels::cuda;

void run_case(allocator& dev, int slots, int rows, int nkv, int d, int k, std::int64_t store_tokens,
              std::int64_t max_pos, unsigned seed) {
  SCOPED_TRACE("slots " + std::to_string(slots) + " rows " + std::to_string(rows) + " kv " + std::to_string(nkv) +
               " d " + std::to_string(d) + " k " + std::to_string(k) + " store " + std::to_string(store_tokens) +
               " seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto pinned = make_pinned_allocator();
  const std::size_t store_elems = std::size_t(slots * nkv) * std::size_t(store_tokens) * std::size_t(2 * d);
  buffer store(*pinned, store_elems * 2);
  auto* sp = store.as<std::uint16_t>();
  for (std::size_t i = 0; i < store_elems; ++i) sp[i] = std::uint16_t(rng());
  // Planner rows to distinct random slots.
  std::vector<std::int32_t> all_slots(static_cast<std::size_t>(slots));
  std::iota(all_slots.begin(), all_slots.end(), 0);
  std::shuffle(all_slots.begin(), all_slots.end(), rng);
  std::vector<std::int32_t> row_slot(all_slots.begin(), all_slots.begin() + rows);
  std::vector<std::int32_t> top(std::size_t(rows * nkv * k), 0x7777), count(std::size_t(rows * nkv));
  std::vector<std::int32_t> candidates(static_cast<std::size_t>(max_pos));
  std::iota(candidates.begin(), candidates.end(), 0);
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < nkv; ++h) {
      const int n = int(std::min<std::int64_t>(rng() % (k + 1), max_pos));
      count[std::size_t(r * nkv + h)] = n;
      std::shuffle(candidates.begin(), candidates.end(), rng);
      std::copy(candidates.begin(), candidates.begin() + n, top.begin() + std::ptrdiff_t((r * nkv + h) * k));
    }
  count[0] = int(std::min<std::int64_t>(k, max_pos));  // one full set
  std::shuffle(candidates.begin(), candidates.end(), rng);
  std::copy(candidates.begin(), candidates.begin() + count[0], top.begin());

  const std::size_t sets = std::size_t(slots * nkv);
  std::vector<std::int32_t> pos_ref(sets * std::size_t(k), -1), cnt_ref(sets, -1);
  std::vector<std::uint16_t> k_ref(sets * std::size_t(k * d), 0xffff), v_ref = k_ref;
  kernels::fetch_rows_args a;
  a.topk_positions = top.data();
  a.topk_count = count.data();
  a.k = k;
  a.row_slot = row_slot.data();
  a.store = sp;
  a.store_tokens = store_tokens;
  a.rows = rows;
  a.n_kv_heads = nkv;
  a.head_dim = d;
  a.positions = pos_ref.data();
  a.count = cnt_ref.data();
  a.k_rows = k_ref.data();
  a.v_rows = v_ref.data();
  kernels::cpu::fetch_rows(a);

  dev_array<std::int32_t> top_d(dev, top), count_d(dev, count), slot_d(dev, row_slot);
  dev_array<std::int32_t> pos_d(dev, sets * std::size_t(k)), cnt_d(dev, sets);
  dev_array<std::uint16_t> k_d(dev, sets * std::size_t(k * d)), v_d(dev, sets * std::size_t(k * d));
  a.topk_positions = top_d.get();
  a.topk_count = count_d.get();
  a.row_slot = slot_d.get();
  a.store = sp;  // mapped pinned memory: the same pointer on the device
  a.positions = pos_d.get();
  a.count = cnt_d.get();
  a.k_rows = k_d.get();
  a.v_rows = v_d.get();
  kc::fetch_rows(a, nullptr);
  kc::device_synchronize();
  EXPECT_EQ(pos_d.download(), pos_ref);
  EXPECT_EQ(cnt_d.download(), cnt_ref);
  EXPECT_EQ(k_d.download(), k_ref);
  EXPECT_EQ(v_d.download(), v_ref);
  EXPECT_TRUE(pos_d.sentinel_intact() && cnt_d.sentinel_intact() && k_d.sentinel_intact() && v_d.sentinel_intact());
}
#endif

TEST_F(cuda_fetch_rows, matches_cpu_on_random_sets) {
#ifdef SPECPIPE_HAVE_CUDA
  unsigned seed = 300;
  run_case(*dev_, 4, 3, 2, 128, 64, 500, 500, ++seed);
  run_case(*dev_, 8, 8, 8, 128, 64, 3000, 2900, ++seed);
  run_case(*dev_, 3, 1, 2, 64, 7, 40, 40, ++seed);
  run_case(*dev_, 2, 2, 1, 128, 1024, 2048, 2048, ++seed);  // the kernel's largest k
  run_case(*dev_, 5, 2, 4, 128, 33, 100, 1000, ++seed);     // positions alias modulo the store
  run_case(*dev_, 2, 2, 2, 128, 16, 10, 5, ++seed);         // fewer candidates than k
  // From kc::fetch_rows_many_blocks (row, head) pairs on: the 64-thread blocks.
  run_case(*dev_, 40, 32, 8, 128, 64, 3000, 2900, ++seed);
  run_case(*dev_, 64, 64, 4, 128, 1024, 1100, 1100, ++seed);
  run_case(*dev_, 40, 37, 8, 64, 33, 100, 1000, ++seed);
#endif
}

// count_hits against the CPU: needed sets overlapping the fetched ones by
// chance, empty sets, a row whose needed set equals its fetched set.
TEST_F(cuda_fetch_rows, hit_counts_match_cpu) {
#ifdef SPECPIPE_HAVE_CUDA
  std::mt19937 rng(77);
  const int slots = 4, rows = 3, nkv = 8, k = 64;
  std::vector<std::int32_t> fpos(std::size_t(slots * nkv * k), 0), fcnt(std::size_t(slots * nkv));
  std::vector<std::int32_t> need(std::size_t(rows * nkv * k), 0), ncnt(std::size_t(rows * nkv));
  std::vector<std::int32_t> all(300);
  std::iota(all.begin(), all.end(), 0);
  for (int i = 0; i < slots * nkv; ++i) {
    std::shuffle(all.begin(), all.end(), rng);
    fcnt[std::size_t(i)] = int(rng() % (k + 1));
    std::sort(all.begin(), all.begin() + fcnt[std::size_t(i)]);
    std::copy(all.begin(), all.begin() + fcnt[std::size_t(i)], fpos.begin() + std::ptrdiff_t(i * k));
  }
  const std::vector<std::int32_t> row_slot = {3, 0, 2};
  for (int i = 0; i < rows * nkv; ++i) {
    std::shuffle(all.begin(), all.end(), rng);
    ncnt[std::size_t(i)] = int(rng() % (k + 1));
    std::copy(all.begin(), all.begin() + ncnt[std::size_t(i)], need.begin() + std::ptrdiff_t(i * k));
  }
  // Row 1's head 0 needs exactly what slot 0's head 0 holds.
  ncnt[std::size_t(nkv)] = fcnt[0];
  std::copy(fpos.begin(), fpos.begin() + fcnt[0], need.begin() + std::ptrdiff_t(nkv * k));
  kernels::count_hits_args a;
  a.needed = need.data();
  a.needed_count = ncnt.data();
  a.k = k;
  a.row_slot = row_slot.data();
  a.fetched_positions = fpos.data();
  a.fetched_count = fcnt.data();
  a.fetched_stride = k;
  a.rows = rows;
  a.n_kv_heads = nkv;
  unsigned long long want[2] = {5, 7};  // accumulates onto what is there
  a.totals = want;
  kernels::cpu::count_hits(a);
  dev_array<std::int32_t> nd(*dev_, need), nc(*dev_, ncnt), sd(*dev_, row_slot), fp(*dev_, fpos), fc(*dev_, fcnt);
  dev_array<unsigned long long> tot(*dev_, std::vector<unsigned long long>{5, 7});
  a.needed = nd.get();
  a.needed_count = nc.get();
  a.row_slot = sd.get();
  a.fetched_positions = fp.get();
  a.fetched_count = fc.get();
  a.totals = tot.get();
  kc::count_hits(a, nullptr);
  const auto got = tot.download();
  EXPECT_EQ(got[0], want[0]);
  EXPECT_EQ(got[1], want[1]);
  EXPECT_GT(want[1], 7u + std::uint64_t(fcnt[0]) - 1);
#endif
}

TEST_F(cuda_fetch_rows, refuses_bad_arguments) {
#ifdef SPECPIPE_HAVE_CUDA
  dev_array<std::int32_t> ints(*dev_, 64);
  dev_array<std::uint16_t> rows(*dev_, 4096);
  kernels::fetch_rows_args a;
  a.topk_positions = ints.get();
  a.topk_count = ints.get();
  a.row_slot = ints.get();
  a.store = rows.get();
  a.positions = ints.get();
  a.count = ints.get();
  a.k_rows = rows.get();
  a.v_rows = rows.get();
  a.k = 8;
  a.store_tokens = 4;
  a.rows = 1;
  a.n_kv_heads = 1;
  a.head_dim = 12;  // not a multiple of 8
  EXPECT_THROW(kc::fetch_rows(a, nullptr), std::invalid_argument);
  a.head_dim = 64;
  a.k = 1025;
  EXPECT_THROW(kc::fetch_rows(a, nullptr), std::invalid_argument);
  a.k = 8;
  a.k_rows = rows.get() + 1;  // misaligned
  EXPECT_THROW(kc::fetch_rows(a, nullptr), std::invalid_argument);
  a.k_rows = rows.get();
  a.store = nullptr;
  EXPECT_THROW(kc::fetch_rows(a, nullptr), std::invalid_argument);
#endif
}

}  // namespace
}  // namespace specpipe::test
