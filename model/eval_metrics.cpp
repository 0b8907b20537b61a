#include "model/eval_metrics.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace specpipe {
namespace {

double log_sum_exp(std::span<const float> x) {
  double top = -std::numeric_limits<double>::infinity();
  for (const float v : x) top = std::max(top, double(v));
  double sum = 0;
  for (const float v : x) sum += std::exp(double(v) - top);
  return top + std::log(sum);
}

}  // namespace

double token_nll(std::span<const float> logits, std::int32_t target) {
  if (target < 0 || std::size_t(target) >= logits.size())
    throw std::invalid_argument("token_nll: target id " + std::to_string(target) +
                                " outside the " + std::to_string(logits.size()) + " logits");
  return log_sum_exp(logits) - double(logits[std::size_t(target)]);
}

std::int32_t greedy_token(std::span<const float> logits) {
  if (logits.empty()) throw std::invalid_argument("greedy_token: no logits");
  std::size_t best = 0;
  for (std::size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return std::int32_t(best);
}

double kl_divergence(std::span<const float> p_logits, std::span<const float> q_logits) {
  if (p_logits.size() != q_logits.size() || p_logits.empty())
    throw std::invalid_argument("kl_divergence: distributions of " + std::to_string(p_logits.size()) +
                                " and " + std::to_string(q_logits.size()) + " entries");
  const double lse_p = log_sum_exp(p_logits);
  const double lse_q = log_sum_exp(q_logits);
  double kl = 0;
  for (std::size_t i = 0; i < p_logits.size(); ++i) {
    const double log_p = double(p_logits[i]) - lse_p;
    const double log_q = double(q_logits[i]) - lse_q;
    const double p = std::exp(log_p);
    // p -> 0 contributes nothing (lim p log p = 0), even where q is also 0.
    if (p > 0) kl += p * (log_p - log_q);
  }
  return kl;
}

void perplexity_accumulator::add(double nll) {
  sum_ += nll;
  ++count_;
}

void perplexity_accumulator::merge(const perplexity_accumulator& other) {
  sum_ += other.sum_;
  count_ += other.count_;
}

double perplexity_accumulator::mean_nll() const {
  return count_ ? sum_ / double(count_) : std::numeric_limits<double>::quiet_NaN();
}

double perplexity_accumulator::perplexity() const { return std::exp(mean_nll()); }

}  // namespace specpipe
