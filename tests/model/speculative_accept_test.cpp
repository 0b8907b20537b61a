// Verification of drafted tokens: greedy cases, and a chi-square test that
// speculative sampling leaves the target distribution unchanged, with a
// deliberately wrong variant the same test rejects (so the test can fail).
#include "model/speculative_accept.hpp"

#include <gtest/gtest.h>

#include <random>

#include "kernels/sampling.hpp"

namespace specpipe {
namespace {

constexpr std::int64_t V = 5;

// Logit rows whose argmax is the given token.
std::vector<float> peaked(std::initializer_list<int> argmaxes) {
  std::vector<float> l;
  for (const int a : argmaxes)
    for (int v = 0; v < V; ++v) l.push_back(v == a ? 2.0f : 0.1f * float(v));
  return l;
}

TEST(AcceptGreedy, KeepsTheMatchingPrefixAndCorrectsTheFirstMismatch) {
  const std::vector<std::int32_t> drafts{3, 1, 4};
  auto r = accept_greedy(drafts, peaked({3, 1, 2, 0}), V);
  EXPECT_EQ(r.accepted, 2);
  EXPECT_EQ(r.tokens, (std::vector<std::int32_t>{3, 1, 2}));

  r = accept_greedy(drafts, peaked({0, 1, 4, 2}), V);  // the first is already wrong
  EXPECT_EQ(r.accepted, 0);
  EXPECT_EQ(r.tokens, (std::vector<std::int32_t>{0}));
}

TEST(AcceptGreedy, AllKeptGivesTheBonusToken) {
  const std::vector<std::int32_t> drafts{3, 1, 4};
  const auto r = accept_greedy(drafts, peaked({3, 1, 4, 2}), V);
  EXPECT_EQ(r.accepted, 3);
  EXPECT_EQ(r.tokens, (std::vector<std::int32_t>{3, 1, 4, 2}));
}

TEST(AcceptGreedy, NoDraftsIsAPlainTargetStep) {
  const auto r = accept_greedy({}, peaked({2}), V);
  EXPECT_EQ(r.accepted, 0);
  EXPECT_EQ(r.tokens, (std::vector<std::int32_t>{2}));
}

TEST(AcceptGreedy, BadInputsAreNamed) {
  const std::vector<std::int32_t> drafts{7};
  EXPECT_THROW(accept_greedy(drafts, peaked({0, 0}), V), std::invalid_argument);
  const std::vector<std::int32_t> ok{1};
  EXPECT_THROW(accept_greedy(ok, peaked({0}), V), std::invalid_argument);  // one row short
}

const std::vector<float> p_target{0.40f, 0.30f, 0.15f, 0.10f, 0.05f};
const std::vector<float> q_draft{0.10f, 0.20f, 0.30f, 0.20f, 0.20f};

double chi_square(const std::vector<std::int64_t>& counts, const std::vector<float>& p) {
  std::int64_t n = 0;
  for (const auto c : counts) n += c;
  double x2 = 0;
  for (std::size_t v = 0; v < p.size(); ++v) {
    const double e = double(n) * p[v];
    x2 += (double(counts[v]) - e) * (double(counts[v]) - e) / e;
  }
  return x2;
}

// The chi-square 99.9% quantile at 4 degrees of freedom: a correct sampler
// exceeds it once in a thousand seeds; the seed below is fixed.
constexpr double chi2_4dof_999 = 18.467;

using acceptor = std::function<accept_result(std::span<const std::int32_t>, std::span<const float>,
                                             std::span<const float>, std::mt19937_64&)>;

// Draws gamma tokens from q, verifies them against p (the same p and q at
// every position) and counts the first and the second output token.
void sample_outputs(const acceptor& accept, int gamma, std::int64_t rounds, std::vector<std::int64_t>& first,
                    std::vector<std::int64_t>& second) {
  std::mt19937_64 rng(20250611);
  std::vector<float> p, q;
  for (int i = 0; i <= gamma; ++i) p.insert(p.end(), p_target.begin(), p_target.end());
  for (int i = 0; i < gamma; ++i) q.insert(q.end(), q_draft.begin(), q_draft.end());
  first.assign(V, 0);
  second.assign(V, 0);
  std::vector<std::int32_t> drafts(static_cast<std::size_t>(gamma));
  for (std::int64_t r = 0; r < rounds; ++r) {
    for (auto& d : drafts)
      d = std::int32_t(kernels::cpu::sample_categorical(q_draft.data(), V, std::generate_canonical<double, 53>(rng)));
    const auto res = accept(drafts, p, q, rng);
    ++first[std::size_t(res.tokens[0])];
    if (res.tokens.size() > 1) ++second[std::size_t(res.tokens[1])];
  }
}

accept_result correct(std::span<const std::int32_t> drafts, std::span<const float> p, std::span<const float> q,
                      std::mt19937_64& rng) {
  std::vector<float> scratch(V);
  return accept_sampled(drafts, p, q, V, [&] { return std::generate_canonical<double, 53>(rng); }, scratch);
}

// A classic bug: on rejection, resample from p instead of the residual
// max(0, p - q). Tokens that q over-proposes then come out too often.
accept_result resample_from_p(std::span<const std::int32_t> drafts, std::span<const float> p,
                              std::span<const float> q, std::mt19937_64& rng) {
  accept_result r;
  auto u = [&] { return std::generate_canonical<double, 53>(rng); };
  for (std::size_t i = 0; i < drafts.size(); ++i) {
    const float* pi = p.data() + i * V;
    const float* qi = q.data() + i * V;
    if (u() * qi[drafts[i]] < pi[drafts[i]]) {
      r.tokens.push_back(drafts[i]);
      ++r.accepted;
      continue;
    }
    r.tokens.push_back(std::int32_t(kernels::cpu::sample_categorical(pi, V, u())));
    return r;
  }
  r.tokens.push_back(std::int32_t(kernels::cpu::sample_categorical(p.data() + drafts.size() * V, V, u())));
  return r;
}

TEST(AcceptSampled, OutputIsDistributedAsTheTarget) {
  std::vector<std::int64_t> first, second;
  sample_outputs(correct, 1, 200000, first, second);
  EXPECT_LT(chi_square(first, p_target), chi2_4dof_999) << "first token";
  EXPECT_LT(chi_square(second, p_target), chi2_4dof_999) << "bonus token";

  sample_outputs(correct, 4, 100000, first, second);
  EXPECT_LT(chi_square(first, p_target), chi2_4dof_999) << "first token, gamma 4";
  EXPECT_LT(chi_square(second, p_target), chi2_4dof_999) << "second token, gamma 4";
}

TEST(AcceptSampled, TheTestRejectsResamplingFromTheTargetInsteadOfTheResidual) {
  std::vector<std::int64_t> first, second;
  sample_outputs(resample_from_p, 1, 200000, first, second);
  EXPECT_GT(chi_square(first, p_target), 100 * chi2_4dof_999);
}

TEST(AcceptSampled, AcceptanceRateIsTheOverlapOfPAndQ) {
  // P(accept) = sum_x min(p(x), q(x)) (Leviathan et al., Corollary 3.6): 0.6 here.
  std::mt19937_64 rng(7);
  std::int64_t kept = 0;
  const std::int64_t rounds = 100000;
  std::vector<float> p(p_target), q(q_draft);
  p.insert(p.end(), p_target.begin(), p_target.end());
  std::vector<float> scratch(V);
  for (std::int64_t r = 0; r < rounds; ++r) {
    const std::int32_t d =
        std::int32_t(kernels::cpu::sample_categorical(q_draft.data(), V, std::generate_canonical<double, 53>(rng)));
    const std::int32_t drafts[1] = {d};
    kept += accept_sampled(drafts, p, q, V, [&] { return std::generate_canonical<double, 53>(rng); }, scratch).accepted;
  }
  EXPECT_NEAR(double(kept) / double(rounds), 0.6, 0.01);
}

TEST(AcceptSampled, ResidualIsThePartOfPThatQUnderProposes) {
  std::vector<float> out(V);
  const double mass = residual_distribution(p_target.data(), q_draft.data(), V, out.data());
  EXPECT_NEAR(mass, 0.4, 1e-6);  // 1 - sum min(p, q)
  EXPECT_FLOAT_EQ(out[0], 0.30f);
  EXPECT_FLOAT_EQ(out[1], 0.10f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_EQ(out[4], 0.0f);
}

TEST(AcceptSampled, IdenticalDistributionsAcceptEverything) {
  std::mt19937_64 rng(3);
  std::vector<float> p, q;
  for (int i = 0; i < 4; ++i) p.insert(p.end(), p_target.begin(), p_target.end());
  for (int i = 0; i < 3; ++i) q.insert(q.end(), p_target.begin(), p_target.end());
  std::vector<float> scratch(V);
  const std::vector<std::int32_t> drafts{0, 4, 2};
  const auto r = accept_sampled(drafts, p, q, V, [&] { return std::generate_canonical<double, 53>(rng); }, scratch);
  EXPECT_EQ(r.accepted, 3);
  EXPECT_EQ(r.tokens.size(), 4u);
}

}  // namespace
}  // namespace specpipe
