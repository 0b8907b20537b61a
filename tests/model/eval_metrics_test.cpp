// The pure numbers of `specpipe eval`: NLL and perplexity of known
// distributions, KL divergence, greedy choice, window placement, progress.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <vector>

#include "model/eval_metrics.hpp"
#include "model/eval_progress.hpp"
#include "model/eval_windows.hpp"

namespace specpipe {
namespace {

std::vector<float> logits_of(const std::vector<double>& probs, float shift = 0) {
  std::vector<float> out;
  for (const double p : probs) out.push_back(float(std::log(p)) + shift);
  return out;
}

TEST(EvalMetrics, NllOfKnownDistribution) {
  const std::vector<double> p{0.5, 0.25, 0.125, 0.125};
  // Logits are only defined up to a constant: shift them to check the log-sum-exp.
  const auto logits = logits_of(p, 37.0f);
  for (int t = 0; t < 4; ++t) EXPECT_NEAR(token_nll(logits, t), -std::log(p[std::size_t(t)]), 1e-5) << t;
  EXPECT_THROW(token_nll(logits, 4), std::invalid_argument);
  EXPECT_THROW(token_nll(logits, -1), std::invalid_argument);
}

TEST(EvalMetrics, PerplexityOfUniformIsVocabSize) {
  const std::vector<float> uniform(4096, 0.25f);
  perplexity_accumulator acc;
  for (int t = 0; t < 100; ++t) acc.add(token_nll(uniform, t * 37));
  EXPECT_EQ(acc.count(), 100);
  EXPECT_NEAR(acc.perplexity(), 4096.0, 1e-6 * 4096);
}

TEST(EvalMetrics, PerplexityIsExpOfMeanNllAndMerges) {
  perplexity_accumulator a, b;
  a.add(std::log(2.0));
  a.add(std::log(8.0));  // mean log 4 -> perplexity 4
  EXPECT_NEAR(a.perplexity(), 4.0, 1e-12);
  b.add(std::log(4.0));
  a.merge(b);
  EXPECT_EQ(a.count(), 3);
  EXPECT_NEAR(a.perplexity(), 4.0, 1e-12);
  EXPECT_TRUE(std::isnan(perplexity_accumulator{}.perplexity()));
}

TEST(EvalMetrics, KlOfIdenticalDistributionsIsZero) {
  std::vector<float> x(4096);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(double(i) * 0.37) * 8);
  EXPECT_EQ(kl_divergence(x, x), 0.0);
  // A constant shift is the same distribution.
  std::vector<float> y = x;
  for (auto& v : y) v += 3.0f;
  EXPECT_NEAR(kl_divergence(x, y), 0.0, 1e-9);
}

TEST(EvalMetrics, KlOfKnownPair) {
  const std::vector<double> p{0.5, 0.5}, q{0.9, 0.1};
  const double expected = 0.5 * std::log(0.5 / 0.9) + 0.5 * std::log(0.5 / 0.1);
  EXPECT_NEAR(kl_divergence(logits_of(p), logits_of(q)), expected, 1e-6);
  // Not symmetric.
  const double reverse = 0.9 * std::log(0.9 / 0.5) + 0.1 * std::log(0.1 / 0.5);
  EXPECT_NEAR(kl_divergence(logits_of(q), logits_of(p)), reverse, 1e-6);
  EXPECT_THROW(kl_divergence(logits_of(p), logits_of({0.2, 0.3, 0.5})), std::invalid_argument);
}

TEST(EvalMetrics, GreedyPicksFirstMaximum) {
  EXPECT_EQ(greedy_token(std::vector<float>{0, 3, 1, 3}), 1);
  EXPECT_EQ(greedy_token(std::vector<float>{-5}), 0);
  EXPECT_THROW(greedy_token(std::vector<float>{}), std::invalid_argument);
}

TEST(EvalWindows, EvenlySpreadAndDisjoint) {
  EXPECT_EQ(eval_window_starts(100, 100, 1), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(eval_window_starts(1000, 100, 1), (std::vector<std::int64_t>{0}));
  const auto s = eval_window_starts(1000, 100, 4);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s.front(), 0);
  EXPECT_EQ(s.back(), 900);  // the last window ends at the text's end
  for (std::size_t k = 1; k < s.size(); ++k) EXPECT_GE(s[k], s[k - 1] + 100);
  EXPECT_EQ(eval_window_starts(300, 100, 3), (std::vector<std::int64_t>{0, 100, 200}));
  EXPECT_THROW(eval_window_starts(299, 100, 3), std::invalid_argument);
  EXPECT_THROW(eval_window_starts(100, 0, 1), std::invalid_argument);
}

TEST(EvalProgress, LineModeReportsEachStepOnce) {
  std::ostringstream out;
  {
    progress_meter p(out, "eval ppl", 200, false, "forwards", 25);
    for (int i = 0; i < 200; ++i) p.advance();
  }
  const std::string s = out.str();
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 4) << s;
  EXPECT_NE(s.find("eval ppl: 25% (50/200 forwards"), std::string::npos) << s;
  EXPECT_NE(s.find("100% (200/200"), std::string::npos) << s;
  EXPECT_EQ(s.find('\r'), std::string::npos);
}

TEST(EvalProgress, LineModeSaysWhereItStopped) {
  std::ostringstream out;
  {
    progress_meter p(out, "eval agree", 10, false);
    p.advance(3);
  }
  EXPECT_NE(out.str().find("stopped at 3/10"), std::string::npos) << out.str();
}

TEST(EvalProgress, TerminalModeRedrawsInPlace) {
  std::ostringstream out;
  {
    progress_meter p(out, "eval", 4, true);
    p.advance(4);
  }
  const std::string s = out.str();
  EXPECT_NE(s.find('\r'), std::string::npos);
  EXPECT_NE(s.find(progress_meter::bar(1.0, 30)), std::string::npos);
  EXPECT_EQ(s.back(), '\n');
  EXPECT_EQ(progress_meter::bar(0.5, 4), "[##--]");
  EXPECT_EQ(progress_meter::bar(2.0, 3), "[###]");
}

}  // namespace
}  // namespace specpipe
