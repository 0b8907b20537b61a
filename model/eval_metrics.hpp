#pragma once
// The numbers `specpipe eval` reports, from raw next-token logits: the
// negative log-likelihood of the true token (perplexity is exp of its mean),
// the greedy choice, and KL divergence between two next-token distributions.
// All sums run in double over a log-softmax, so a 4096-way softmax in f32
// logits does not lose the tail.
#include <cstdint>
#include <span>

namespace specpipe {

// -log softmax(logits)[target] = logsumexp(logits) - logits[target].
// Throws std::invalid_argument when target is outside the logits.
double token_nll(std::span<const float> logits, std::int32_t target);

// Index of the largest logit; the first one on ties (what greedy decoding picks).
std::int32_t greedy_token(std::span<const float> logits);

// KL(P || Q) = sum_i p_i (log p_i - log q_i), P = softmax(p_logits),
// Q = softmax(q_logits), in nats. Both spans must have the same size.
double kl_divergence(std::span<const float> p_logits, std::span<const float> q_logits);

// Running mean of per-token NLL; perplexity = exp(mean NLL).
class perplexity_accumulator {
 public:
  void add(double nll);
  void merge(const perplexity_accumulator& other);
  std::int64_t count() const { return count_; }
  double mean_nll() const;    // NaN when empty
  double perplexity() const;  // NaN when empty

 private:
  double sum_ = 0;
  std::int64_t count_ = 0;
};

}  // namespace specpipe
