// The speculative-decoding counters: rates, the per-token alpha, merging.
#include "model/spec_stats.hpp"

#include <gtest/gtest.h>

namespace specpipe {
namespace {

TEST(SpecStats, RatesAndHistogram) {
  spec_decode_stats s;
  s.add_round(4, 4, 0.01, 0.02);  // all kept
  s.add_round(4, 1, 0.01, 0.02);  // second draft rejected
  s.add_round(4, 0, 0.01, 0.02);  // first rejected
  s.add_round(0, 0, 0.0, 0.02);   // no draft (end of the context): not a round of drafting
  EXPECT_EQ(s.drafts, 3);
  EXPECT_EQ(s.draft_tokens, 12);
  EXPECT_EQ(s.accepted_tokens, 5);
  EXPECT_EQ(s.rejections, 2);
  EXPECT_EQ(s.accepted_per_position, (std::vector<std::int64_t>{2, 1, 1, 1}));
  EXPECT_DOUBLE_EQ(s.acceptance_rate(), 5.0 / 12.0);
  EXPECT_DOUBLE_EQ(s.per_token_acceptance(), 5.0 / 7.0);
  EXPECT_DOUBLE_EQ(s.mean_acceptance_length(), 5.0 / 3.0 + 1.0);
  EXPECT_NE(s.summary().find("kept by position 67% 33% 33% 33%"), std::string::npos) << s.summary();
}

TEST(SpecStats, MergeAddsAndWidensTheHistogram) {
  spec_decode_stats a, b;
  a.add_round(2, 2, 0.1, 0.2);
  b.add_round(5, 3, 0.1, 0.2);
  a.merge(b);
  EXPECT_EQ(a.drafts, 2);
  EXPECT_EQ(a.accepted_tokens, 5);
  EXPECT_EQ(a.rejections, 1);
  EXPECT_EQ(a.accepted_per_position, (std::vector<std::int64_t>{2, 2, 1, 0, 0}));
  EXPECT_DOUBLE_EQ(a.draft_seconds, 0.2);
  EXPECT_EQ(spec_decode_stats{}.acceptance_rate(), 0.0);
  EXPECT_EQ(spec_decode_stats{}.mean_acceptance_length(), 0.0);
}

}  // namespace
}  // namespace specpipe
