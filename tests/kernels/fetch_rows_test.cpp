// kernels::cpu::fetch_rows, the reference of SpeCache's fetch: positions come
// out ascending whatever order the top-k gave them in, each row is the
// store's K then V run of its (slot, head, position), positions alias modulo
// store_tokens, entries past the count stay untouched, and bad arguments are
// refused with the field's name.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/fetch_rows.hpp"

namespace specpipe::kernels {
namespace {

// Store element (slot, head, token, c) with c < 2 d: a value that names it.
std::uint16_t store_value(int s, int h, std::int64_t t, int c) {
  return std::uint16_t((s * 7 + h * 3 + t * 11 + c) & 0xffff);
}

TEST(fetch_rows, sorts_positions_and_copies_k_then_v) {
  const int nkv = 2, d = 8, k = 4, slots = 3;
  const std::int64_t tokens = 10;
  std::vector<std::uint16_t> store(std::size_t(slots * nkv * tokens * 2 * d));
  for (int s = 0; s < slots; ++s)
    for (int h = 0; h < nkv; ++h)
      for (std::int64_t t = 0; t < tokens; ++t)
        for (int c = 0; c < 2 * d; ++c)
          store[std::size_t(((s * nkv + h) * tokens + t) * 2 * d + c)] = store_value(s, h, t, c);
  // Two planner rows: row 0 -> slot 2, row 1 -> slot 0. Position 13 aliases 3.
  const std::vector<std::int32_t> top = {9, 1, 5, -7, /*h1*/ 13, 0, -7, -7, /*row 1*/ 4, -7, -7, -7, 2, 8, 6, 3};
  const std::vector<std::int32_t> count = {3, 2, 1, 4};
  const std::vector<std::int32_t> row_slot = {2, 0};
  std::vector<std::int32_t> pos(std::size_t(slots * nkv * k), -1), cnt(std::size_t(slots * nkv), -1);
  std::vector<std::uint16_t> kr(std::size_t(slots * nkv * k * d), 0xdead), vr = kr;
  fetch_rows_args a;
  a.topk_positions = top.data();
  a.topk_count = count.data();
  a.k = k;
  a.row_slot = row_slot.data();
  a.store = store.data();
  a.store_tokens = tokens;
  a.rows = 2;
  a.n_kv_heads = nkv;
  a.head_dim = d;
  a.positions = pos.data();
  a.count = cnt.data();
  a.k_rows = kr.data();
  a.v_rows = vr.data();
  cpu::fetch_rows(a);
  auto expect_set = [&](int s, int h, std::vector<std::int32_t> want) {
    SCOPED_TRACE("slot " + std::to_string(s) + " head " + std::to_string(h));
    const std::size_t base = std::size_t((s * nkv + h) * k);
    ASSERT_EQ(cnt[std::size_t(s * nkv + h)], std::int32_t(want.size()));
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(pos[base + i], want[i]);
      for (int c = 0; c < d; ++c) {
        EXPECT_EQ(kr[(base + i) * d + std::size_t(c)], store_value(s, h, want[i] % tokens, c));
        EXPECT_EQ(vr[(base + i) * d + std::size_t(c)], store_value(s, h, want[i] % tokens, d + c));
      }
    }
    for (std::size_t i = want.size(); i < std::size_t(k); ++i) {
      EXPECT_EQ(pos[base + i], -1) << "entry past the count written";
      EXPECT_EQ(kr[(base + i) * d], 0xdead);
    }
  };
  expect_set(2, 0, {1, 5, 9});
  expect_set(2, 1, {0, 13});
  expect_set(0, 0, {4});
  expect_set(0, 1, {2, 3, 6, 8});
  // Slot 1 is nobody's: untouched.
  EXPECT_EQ(cnt[2], -1);
  EXPECT_EQ(cnt[3], -1);
}

TEST(fetch_rows, refuses_bad_arguments) {
  std::vector<std::uint16_t> store(64), rows(64);
  std::vector<std::int32_t> top = {0, 1}, count = {3}, slot = {0}, pos(2), cnt(1);
  fetch_rows_args a;
  a.topk_positions = top.data();
  a.topk_count = count.data();
  a.k = 2;
  a.row_slot = slot.data();
  a.store = store.data();
  a.store_tokens = 2;
  a.rows = 1;
  a.n_kv_heads = 1;
  a.head_dim = 8;
  a.positions = pos.data();
  a.count = cnt.data();
  a.k_rows = rows.data();
  a.v_rows = rows.data() + 16;
  EXPECT_THROW(cpu::fetch_rows(a), std::invalid_argument);  // count 3 > k 2
  count[0] = 2;
  top[1] = -1;
  EXPECT_THROW(cpu::fetch_rows(a), std::invalid_argument);  // negative position
  top[1] = 1;
  a.store = nullptr;
  EXPECT_THROW(cpu::fetch_rows(a), std::invalid_argument);
  a.store = store.data();
  EXPECT_NO_THROW(cpu::fetch_rows(a));
}

}  // namespace
}  // namespace specpipe::kernels
