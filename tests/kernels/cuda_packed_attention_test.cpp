// The tensor-core packed decode attention (kernels/cuda/packed_attention.hpp)
// against the CPU's quantized and mixed attention on the same packed bytes,
// rearranged into the device's per-(slot, head) runs and window ring
// (packed_device_layout.hpp, itself checked on the host): every format and
// read (KIVI 1/2/4-bit, SpeCache 1-bit, hier INT4 and INT8), GQA 1, 2, 4 and
// 8, head_dim 64 and 128, G 32, 64 and 128, odd and wrapping windows,
// several slots of different lengths, causal entries that stop inside the
// window or inside the packed part, split counts and pipeline depths, and
// each kernel variant (lean shared memory, staged combine, both, neither).
// Outputs start as NaN and carry a poisoned sentinel tail.
//
// Tolerance: the kernel rounds w = q s (scores) and P' = p s (values) to f16
// (relative 2^-11 each), so scores move by about 2^-12 ||(q_c s_c U_c)_c||
// and probabilities by ~1e-3 relative with this fixture's outlier channel:
// atol = rtol = 5e-3 on outputs of magnitude ~1 (v1 and the CPU are f32
// throughout). Replaced rows are exact f32 products: their checks are tight.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/cuda_test_util.hpp"
#include "kernels/mixed_attention.hpp"
#include "kernels/packed_device_layout.hpp"
#include "kernels/packed_attention_case.hpp"
#include "kernels/quantized_attention.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/packed_attention.hpp"
#endif

namespace specpipe::test {
namespace {

#ifdef SPECPIPE_HAVE_CUDA
using namespace packed_case;

TEST_F(cuda_packed_attention, matches_cpu_on_the_same_packed_bytes) {
  unsigned seed = 1200;
  const int groups_of[] = {32, 64, 128};
  int gi = 0;
  for (const auto& fc : formats)
    for (const int gq : {1, 2, 4, 8})
      for (const int d : {64, 128}) {
        const int group = groups_of[gi++ % 3];
        // Two slots of different packed lengths and windows, the window ring
        // wrapping; entries: each slot's decode row, one row stopping inside
        // the window and one inside the packed part (causal rows).
        const std::vector<slot_shape> shapes = {{std::int64_t(640 / group), 37}, {std::int64_t(256 / group), 5}};
        const std::int64_t len0 = 640 + 37, len1 = 256 + 5;
        const std::vector<entry> es = {{0, len0}, {1, len1}, {0, len0 - 11}, {1, 200}, {0, 1}};
        run_options ro;
        ro.splits = {1, 4};
        ro.stages = {gq == 4 ? 2 : 3, 4};
        run_case(*dev_, fc, d, 2, gq, group, shapes, es, 41, ++seed, ro);
      }
}

TEST_F(cuda_packed_attention, window_only_packed_only_and_single_rows) {
  unsigned seed = 1300;
  for (const auto& fc : formats) {
    run_options ro;
    ro.splits = {1, 2};
    run_case(*dev_, fc, 128, 2, 4, 64, {{0, 45}}, {{0, 45}, {0, 1}}, 64, ++seed, ro);  // nothing packed yet
    run_case(*dev_, fc, 128, 2, 4, 64, {{3, 1}}, {{0, 193}}, 8, ++seed, ro);          // one window row
    run_case(*dev_, fc, 64, 1, 2, 32, {{9, 0}}, {{0, 288}, {0, 100}}, 4, ++seed, ro);  // no window
    run_case(*dev_, fc, 128, 1, 8, 128, {{2, 130}}, {{0, 386}}, 131, ++seed, ro);    // window past one tile
  }
}

TEST_F(cuda_packed_attention, many_splits_and_long_context) {
  run_options ro;
  ro.splits = {1, 7, 16};
  ro.stages = {2, 3, 4};
  run_case(*dev_, formats[0], 128, 2, 4, 64, {{60, 70}}, {{0, 60 * 64 + 70}}, 130, 1400, ro);
  run_case(*dev_, formats[5], 128, 2, 4, 128, {{24, 200}}, {{0, 24 * 128 + 200}}, 256, 1401, ro);
}

// QuantSpec's verify: the rows of one sequence at consecutive positions in
// one block (their query heads side by side), against the CPU per row. Slot
// 2's rows straddle a window tile boundary (lengths nq + 126 .. nq + 130),
// so the block's last tile holds positions only some of its rows attend.
TEST_F(cuda_packed_attention, multi_query_blocks_match_cpu_per_row) {
  run_options ro;
  ro.splits = {1, 3};
  run_multi_query(*dev_, ro, 1450);
}

TEST_F(cuda_packed_attention, mixed_rows_match_cpu_mixed_attention) {
  unsigned seed = 1500;
  for (const auto order : both_orders)
  for (const auto& fc : formats)
    for (const bool f16 : {false, true}) {
      const std::vector<slot_shape> shapes = {{5, 23}, {2, 64}};
      const std::vector<entry> es = {{0, 5 * 64 + 23}, {1, 2 * 64 + 64}, {0, 100}};
      std::mt19937 rng(++seed);
      const auto rows = make_replaced(es, 2, 128, 48, f16, false, rng);
      run_options ro;
      ro.rows = &rows;
      ro.splits = {1, 3};
      ro.order = order;
      if (order == kc::packed_order::lane) ro.v4_blocks = {0, 4};
      run_case(*dev_, fc, 128, 2, 4, 64, shapes, es, 70, seed, ro);
    }
}

// SpeCache's step: the real and the speculative row of a slot (and rows of
// other slots between them) read the slot's one set of fetched rows.
TEST_F(cuda_packed_attention, entries_share_rows_through_an_index) {
  unsigned seed = 1550;
  for (const auto order : both_orders)
    for (const auto& fc : {formats[0], formats[3], formats[5]}) {
      run_options ro;
      ro.order = order;
      run_shared_rows(*dev_, fc, {{0, 5 * 64 + 23}, {1, 2 * 64 + 64}},
                      {{0, 5 * 64 + 23}, {1, 2 * 64 + 64}, {0, 5 * 64 + 24}, {1, 2 * 64 + 65}}, {0, 1, 0, 1},
                      {{5, 25}, {2, 66}}, ++seed, ro);
    }
}

// The same in one multi-query block per slot (SpeCache's step: the real
// row and the speculative one at the next position share each code load and
// the slot's set), with raw scores per column: both entries' probabilities
// against the CPU.
TEST_F(cuda_packed_attention, multi_query_blocks_with_shared_rows_and_scores) {
  unsigned seed = 1580;
  run_options ro;
  ro.blocks = {{0, 2}, {2, 2}};
  ro.max_queries = 2;
  ro.probs = true;
  for (const auto order : both_orders)
    for (const auto& fc : {formats[0], formats[3], formats[1]}) {
      ro.order = order;
      ro.v4_blocks = order == kc::packed_order::lane ? std::vector<int>{0, 4} : std::vector<int>{0};
      run_shared_rows(*dev_, fc, {{0, 5 * 64 + 23}, {1, 2 * 64 + 60}},
                      {{0, 5 * 64 + 24}, {0, 5 * 64 + 25}, {1, 2 * 64 + 61}, {1, 2 * 64 + 62}}, {0, 0, 1, 1},
                      {{5, 25}, {2, 62}}, ++seed, ro);
    }
}

TEST_F(cuda_packed_attention, every_position_replaced_equals_full_attention) {
  unsigned seed = 1600;
  for (const auto order : both_orders)
  for (const auto& fc : {formats[0], formats[5]}) {
    const std::vector<slot_shape> shapes = {{4, 30}};
    const std::vector<entry> es = {{0, 4 * 64 + 30}, {0, 77}};
    // Build the fixtures once to take their exact rows (same seed as run_case's).
    const auto fs = make_slots(fc, 128, 2, 4, 64, shapes, seed + 1);
    std::mt19937 rng(seed);
    const auto rows = make_replaced(es, 2, 128, 4 * 64 + 30, false, true, rng, &fs);
    run_options ro;
    ro.rows = &rows;
    ro.exact_full = true;
    ro.splits = {1, 2};
    ro.order = order;
    run_case(*dev_, fc, 128, 2, 4, 64, shapes, es, 32, seed + 1, ro);
  }
}

TEST_F(cuda_packed_attention, probabilities_match_cpu) {
  unsigned seed = 1700;
  for (const auto order : both_orders)
  for (const auto& fc : {formats[1], formats[3], formats[5]}) {
    run_options ro;
    ro.order = order;
    ro.probs = true;
    ro.splits = {1, 3};
    run_case(*dev_, fc, 128, 2, 4, 64, {{4, 21}, {1, 3}}, {{0, 4 * 64 + 21}, {1, 67}, {0, 150}}, 24, ++seed, ro);
    std::mt19937 rng(seed);
    const std::vector<entry> es = {{0, 3 * 64 + 9}};
    const auto rows = make_replaced(es, 2, 128, 16, false, false, rng);
    ro.rows = &rows;
    run_case(*dev_, fc, 128, 2, 4, 64, {{3, 9}}, es, 16, seed, ro);
  }
}

TEST_F(cuda_packed_attention, rejects_bad_arguments) {
  kc::packed_attention_args a;
  a.entries = 1;
  a.n_heads = 8;
  a.cache.n_kv_heads = 2;
  a.cache.head_dim = 96;
  EXPECT_THROW(kc::packed_attention(a, nullptr), std::invalid_argument);
  a.cache.head_dim = 128;
  a.cache.group = 16;
  EXPECT_THROW(kc::packed_attention(a, nullptr), std::invalid_argument);
  a.cache.group = 64;
  a.cache.bits = 3;
  EXPECT_THROW(kc::packed_attention(a, nullptr), std::invalid_argument);
  a.cache.bits = 2;
  a.n_heads = 6;  // GQA 3
  EXPECT_THROW(kc::packed_attention(a, nullptr), std::invalid_argument);
  // Lane order (v4): head_dim 128 only; replaced rows and raw scores need their arrays.
  a.n_heads = 8;
  a.cache.order = kc::packed_order::lane;
  // Every required array present (never read: the checks run before any
  // launch), so that each check below is the one that fails.
  alignas(16) static std::uint8_t blob[64] = {};
  a.q = reinterpret_cast<const std::uint16_t*>(blob);
  a.partial = reinterpret_cast<float*>(blob);
  a.out_f32 = reinterpret_cast<float*>(blob);
  a.entry_slot = a.entry_quant = a.entry_len = reinterpret_cast<const std::int32_t*>(blob);
  a.cache.k_codes = a.cache.v_codes = blob;
  a.cache.k_scale = a.cache.k_zero = a.cache.v_scale = a.cache.v_zero = reinterpret_cast<const std::uint16_t*>(blob);
  a.cache.win_k = a.cache.win_v = reinterpret_cast<const std::uint16_t*>(blob);
  a.cache.win_cap = 1;
  a.cache.head_dim = 64;
  try {
    kc::packed_attention(a, nullptr);
    ADD_FAILURE() << "lane order with head_dim 64 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim"), std::string::npos) << e.what();
  }
  a.cache.head_dim = 128;
  const std::int32_t dummy = 0;
  a.rows.positions = &dummy;
  try {
    kc::packed_attention(a, nullptr);
    ADD_FAILURE() << "replaced rows without counts or K/V rows were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("replaced rows"), std::string::npos) << e.what();
  }
  a.rows.positions = nullptr;
  float sc = 0.f;
  a.scores = &sc;
  try {
    kc::packed_attention(a, nullptr);
    ADD_FAILURE() << "raw scores without entry rows were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("scores need"), std::string::npos) << e.what();
  }
  a.scores = nullptr;
  for (const int blocks : {1, 2, 5, -1}) {
    a.v4_blocks = blocks;
    try {
      kc::packed_attention(a, nullptr);
      ADD_FAILURE() << "v4_blocks " << blocks << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("v4_blocks"), std::string::npos) << e.what();
    }
  }
}
#endif

TEST_F(cuda_packed_attention, split_choice_fills_the_machine) {
#ifdef SPECPIPE_HAVE_CUDA
  // 64k tokens: 512 packed tiles + 1 window tile per (entry, head); 64 pairs.
  const std::int64_t tiles = kc::packed_attention_tiles(65472, 65536);
  EXPECT_EQ(tiles, 512 + 1);
  const int s = kc::packed_attention_splits(8, 8, tiles, 132, 128, 4);
  EXPECT_GE(64 * s, 132 * 4 * 9 / 10) << "fewer blocks than the slots of one wave";
  // A minimum run per split caps the count; the machine is still filled.
  for (const int min_tiles : {8, 16, 32}) {
    const int sm = kc::packed_attention_splits(8, 8, tiles, 132, 128, 2, min_tiles);
    EXPECT_GE(sm, 1);
    EXPECT_LE(sm, int(tiles / min_tiles)) << "min_split_tiles=" << min_tiles;
    EXPECT_GE(64 * sm, 132 * 2 * 9 / 10) << "min_split_tiles=" << min_tiles;
  }
  // Few pairs: the minimum run gives way to filling one wave. Batch 1 of an
  // MHA model (32 KV heads) at 8k: 64 tiles, 16 per split would be 128
  // blocks for 264 slots.
  const int b1 = kc::packed_attention_splits(1, 32, 64, 132, 128, 2, 16);
  EXPECT_GE(32 * b1, 132 * 2 * 9 / 10) << b1 << " splits";
  EXPECT_LE(b1, 32) << "at least 2 tiles per split";
  // Many pairs keep the minimum run: 64 pairs x 512 tiles.
  EXPECT_LE(kc::packed_attention_splits(8, 8, 512, 132, 128, 2, 16), 32);
#endif
}

}  // namespace
}  // namespace specpipe::test
