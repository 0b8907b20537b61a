// The pipeline's pure cores, without CAF: block table, batching policy,
// top-k choice and hit statistics, text streaming.
#include <gtest/gtest.h>

#include <set>

#include "actors/batch_former.hpp"
#include "actors/kv_block_table.hpp"
#include "model/text_stream.hpp"
#include "actors/topk_planner.hpp"

namespace specpipe::testing {
namespace {

TEST(KvBlockTable, RowsOfOneStreamAreContiguousWithinABlock) {
  kv_block_table t({2, 3, 4, 100});
  EXPECT_EQ(t.append(1, 6), 0);  // 2 blocks per stream x 6 streams
  EXPECT_EQ(t.usage().blocks_used, 12);
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 3; ++h) {
      EXPECT_EQ(t.row(1, l, h, 1), t.row(1, l, h, 0) + 1);
      EXPECT_EQ(t.row(1, l, h, 3), t.row(1, l, h, 0) + 3);
      EXPECT_EQ(t.row(1, l, h, 0) % 4, 0);
    }
  // Every (layer, head, pos) has its own row.
  std::set<std::int64_t> rows;
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 3; ++h)
      for (int p = 0; p < 6; ++p) rows.insert(t.row(1, l, h, p));
  EXPECT_EQ(rows.size(), 36u);
  EXPECT_EQ(t.append(1, 2), 6);  // fits the second blocks: no new ones
  EXPECT_EQ(t.usage().blocks_used, 12);
  EXPECT_EQ(t.blocks_needed(1, 1), 6);
}

TEST(KvBlockTable, BudgetExhaustionIsAllOrNothingAndNamesTheNeed) {
  kv_block_table t({1, 2, 4, 5});
  t.append(1, 8);  // 4 blocks
  try {
    t.append(2, 4);  // needs 2, 1 free
    FAIL();
  } catch (const kv_budget_error& e) {
    EXPECT_EQ(e.needed_blocks(), 2);
    EXPECT_EQ(e.free_blocks(), 1);
    EXPECT_EQ(e.seq(), 2u);
    EXPECT_NE(std::string(e.what()).find("sequence 2"), std::string::npos);
  }
  EXPECT_FALSE(t.contains(2));
  EXPECT_EQ(t.usage().blocks_used, 4);
  EXPECT_EQ(t.free(1), 4);
  EXPECT_EQ(t.usage().blocks_used, 0);
  EXPECT_EQ(t.usage().sequences, 0);
  t.append(2, 4);  // freed blocks are reused
  EXPECT_EQ(t.usage().tokens, 4);
}

TEST(KvBlockTable, ReservedCapacityCannotBeTakenAndAppendsWithinItNeverFail) {
  kv_block_table t({1, 2, 4, 6});  // 2 streams, 6 blocks
  EXPECT_EQ(t.reserve(1, 9), 6);   // 3 blocks per stream: the whole budget
  EXPECT_EQ(t.capacity(1), 12);
  EXPECT_EQ(t.usage().blocks_used, 6);
  EXPECT_EQ(t.usage().blocks_reserved, 6);
  EXPECT_EQ(t.reserve(1, 5), 0);   // already holds enough
  // Nobody else can get the reserved blocks...
  EXPECT_THROW(t.append(2, 1), kv_budget_error);
  EXPECT_THROW(t.reserve(3, 1), kv_budget_error);
  EXPECT_FALSE(t.contains(2));
  EXPECT_FALSE(t.contains(3));
  // ...and the owner fills them token by token without taking any more.
  std::set<std::int64_t> rows;
  for (std::int64_t p = 0; p < 12; ++p) {
    EXPECT_EQ(t.blocks_needed(1, 1), 0) << p;
    EXPECT_EQ(t.append(1, 1), p);
    rows.insert(t.row(1, 0, 0, p));
    rows.insert(t.row(1, 0, 1, p));
  }
  EXPECT_EQ(rows.size(), 24u);  // every row distinct
  EXPECT_EQ(t.row(1, 0, 0, 5), t.row(1, 0, 0, 4) + 1);  // a stream stays contiguous within a block
  EXPECT_EQ(t.usage().blocks_reserved, 0);
  EXPECT_THROW(t.append(1, 1), kv_budget_error);  // past the reservation, the budget decides
  EXPECT_EQ(t.free(1), 6);
  EXPECT_EQ(t.usage().blocks_used, 0);
}

TEST(KvBlockTable, ARefusedReservationNamesTheNeedAndChangesNothing) {
  kv_block_table t({2, 2, 4, 10});
  t.append(1, 4);  // 4 blocks
  try {
    t.reserve(2, 8);  // 2 blocks x 4 streams, 6 free
    FAIL() << "reservation beyond the budget accepted";
  } catch (const kv_budget_error& e) {
    EXPECT_EQ(e.needed_blocks(), 8);
    EXPECT_EQ(e.free_blocks(), 6);
    EXPECT_EQ(e.total_blocks(), 10);
    EXPECT_NE(std::string(e.what()).find("reserving 8 tokens"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(t.contains(2));
  EXPECT_EQ(t.usage().blocks_used, 4);
  EXPECT_EQ(t.reserve(1, 6), 4);  // a sequence's reservation counts what it holds
  EXPECT_EQ(t.usage().blocks_reserved, 4);
  EXPECT_EQ(t.free(1), 8);  // reserved blocks go back with the sequence
  EXPECT_EQ(t.usage().blocks_reserved, 0);
  EXPECT_EQ(t.usage().blocks_used, 0);
}

TEST(KvBlockTable, BadLookupsSayWhat) {
  kv_block_table t({1, 1, 4, 4});
  EXPECT_THROW((void)t.row(9, 0, 0, 0), std::out_of_range);
  t.append(1, 2);
  EXPECT_THROW((void)t.row(1, 0, 0, 2), std::out_of_range);
  EXPECT_THROW((void)t.row(1, 1, 0, 0), std::out_of_range);
  EXPECT_THROW(kv_block_table({0, 1, 4, 4}), std::invalid_argument);
}

TEST(BatchFormer, DecodesGoFirstThenPrefillsThatFit) {
  batch_former f({3, 10});
  const std::vector<batch_candidate> c{{1, seq_phase::prefill, 8, 0},
                                       {2, seq_phase::decode, 1, 1},
                                       {3, seq_phase::prefill, 4, 2},
                                       {4, seq_phase::decode, 1, 3}};
  const auto plan = f(c);
  ASSERT_EQ(plan.step.size(), 3u);
  EXPECT_EQ(plan.step[0].seq, 2u);
  EXPECT_EQ(plan.step[1].seq, 4u);
  EXPECT_EQ(plan.step[2].seq, 1u);  // 8 tokens fit beside 2 decodes
  EXPECT_EQ(plan.tokens, 10);
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_EQ(plan.waiting[0].seq, 3u);
}

TEST(BatchFormer, OversizedPromptRunsAloneInsteadOfStarving) {
  batch_former f({4, 16});
  const auto alone = f(std::vector<batch_candidate>{{1, seq_phase::prefill, 100, 0}, {2, seq_phase::prefill, 4, 1}});
  ASSERT_EQ(alone.step.size(), 1u);
  EXPECT_EQ(alone.step[0].seq, 1u);
  // Beside running decodes it still gets its turn (one oversized prompt a
  // step), else it would wait for as long as anything decodes.
  const auto behind = f(std::vector<batch_candidate>{
      {2, seq_phase::decode, 1, 1}, {1, seq_phase::prefill, 100, 0}, {3, seq_phase::prefill, 50, 2}});
  ASSERT_EQ(behind.step.size(), 2u);
  EXPECT_EQ(behind.step[0].seq, 2u);
  EXPECT_EQ(behind.step[1].seq, 1u);
  ASSERT_EQ(behind.waiting.size(), 1u);
  EXPECT_EQ(behind.waiting[0].seq, 3u);
  // The same for a prompt that fits a step alone but not beside the decodes.
  const auto edge = f(std::vector<batch_candidate>{{2, seq_phase::decode, 1, 1}, {1, seq_phase::prefill, 16, 0}});
  ASSERT_EQ(edge.step.size(), 2u);
  EXPECT_EQ(edge.tokens, 17);
  batch_former fcfs({4, 16}, arrival_order{});
  const auto order = fcfs(std::vector<batch_candidate>{{2, seq_phase::decode, 1, 5}, {1, seq_phase::prefill, 3, 0}});
  EXPECT_EQ(order.step[0].seq, 1u);
  EXPECT_TRUE(f(std::vector<batch_candidate>{}).step.empty());
}

TEST(TopkPositions, AveragesTheGroupAndExcludesTheQuery) {
  // group 2 over 5 positions; head 0 likes 1, head 1 likes 3; both like 4 (the query).
  const std::vector<float> s{0.0f, 0.5f, 0.1f, 0.0f, 0.4f,  //
                             0.0f, 0.0f, 0.1f, 0.6f, 0.3f};
  EXPECT_EQ(topk_positions(s, 2, 5, 4, 2), (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(topk_positions(s, 2, 5, 4, 3), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(topk_positions(s, 2, 5, -1, 1), (std::vector<std::int64_t>{4}));
  // k beyond the positions: all but the query.
  EXPECT_EQ(topk_positions(s, 2, 5, 4, 64), (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_THROW(topk_positions(s, 3, 5, 0, 1), std::invalid_argument);
}

TEST(TopkPlanner, PlansEveryStreamNumberedFromTheFirstLayer) {
  topk_planner p(2);
  spec_scores s;
  s.seq = 5;
  s.n_layers = 2;
  s.n_kv_heads = 1;
  s.group = 1;
  s.n_positions = 4;
  s.query_position = 3;
  s.probs = {0.1f, 0.2f, 0.3f, 0.4f,   // layer 0 -> {1, 2}
             0.4f, 0.3f, 0.2f, 0.1f};  // layer 1 -> {0, 1}
  auto sel = p.plan(s);
  ASSERT_EQ(sel.size(), 2u);
  EXPECT_EQ(sel[0].layer, 0);
  EXPECT_EQ(sel[0].positions, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(sel[1].layer, 1);
  EXPECT_EQ(sel[1].positions, (std::vector<std::int64_t>{0, 1}));
  // One layer's scores, as a worker sends them mid-step.
  s.layer0 = 3;
  sel = p.plan(s);
  EXPECT_EQ(sel[0].layer, 3);
  EXPECT_EQ(sel[1].layer, 4);
  s.probs.pop_back();
  EXPECT_THROW(p.plan(s), std::invalid_argument);
}

TEST(TextStream, HoldsBackPartialStopStringsAndUtf8) {
  // Token i decodes to pieces[i].
  const std::vector<std::string> pieces{"ab", "c", "\xC3", "\xA9", "X", "Y"};
  auto decode = [&](std::span<const std::int32_t> ids) {
    std::string s;
    for (auto i : ids) s += pieces[std::size_t(i)];
    return s;
  };
  text_stream t({"cX"}, decode);
  EXPECT_EQ(t.push(0).delta, "ab");
  EXPECT_EQ(t.push(1).delta, "");       // "c" may start "cX"
  EXPECT_EQ(t.push(2).delta, "c");      // no longer: but \xC3 is half a character
  EXPECT_EQ(t.push(3).delta, "\xC3\xA9");
  auto last = t.push(4);
  EXPECT_FALSE(last.stopped);
  text_stream s({"cX"}, decode);
  s.push(0);
  s.push(1);
  EXPECT_TRUE(s.push(4).stopped);
  EXPECT_EQ(s.text(), "ab");
  EXPECT_EQ(s.flush(), "");
}

}  // namespace
}  // namespace specpipe::testing
