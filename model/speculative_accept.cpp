#include "model/speculative_accept.hpp"

#include <stdexcept>
#include <string>

#include "kernels/sampling.hpp"

namespace specpipe {
namespace {

namespace kc = kernels::cpu;

void check_drafts(std::span<const std::int32_t> drafts, std::int64_t vocab, const char* who) {
  if (vocab <= 0) throw std::invalid_argument(std::string(who) + ": vocab must be positive");
  for (std::size_t i = 0; i < drafts.size(); ++i)
    if (drafts[i] < 0 || drafts[i] >= vocab)
      throw std::invalid_argument(std::string(who) + ": draft " + std::to_string(i) + " has id " +
                                  std::to_string(drafts[i]) + ", outside the vocabulary of " + std::to_string(vocab));
}

void check_rows(std::size_t got, std::size_t rows, std::int64_t vocab, const char* who, const char* what) {
  if (got < rows * std::size_t(vocab))
    throw std::invalid_argument(std::string(who) + ": " + what + " holds " + std::to_string(got) + " floats, needs " +
                                std::to_string(rows) + " x " + std::to_string(vocab));
}

}  // namespace

accept_result accept_greedy(std::span<const std::int32_t> drafts, std::span<const float> target_logits,
                            std::int64_t vocab) {
  check_drafts(drafts, vocab, "accept_greedy");
  check_rows(target_logits.size(), drafts.size() + 1, vocab, "accept_greedy", "target_logits");
  accept_result r;
  for (std::size_t i = 0; i <= drafts.size(); ++i) {
    const std::int64_t best = kc::argmax(target_logits.data() + i * std::size_t(vocab), vocab);
    if (best < 0) throw std::invalid_argument("accept_greedy: target row " + std::to_string(i) + " is all NaN");
    r.tokens.push_back(std::int32_t(best));
    if (i == drafts.size() || drafts[i] != best) break;
    ++r.accepted;
  }
  return r;
}

double residual_distribution(const float* p, const float* q, std::int64_t vocab, float* out) {
  double mass = 0;
  for (std::int64_t v = 0; v < vocab; ++v) {
    const float d = p[v] - q[v];
    out[v] = d > 0 ? d : 0.0f;
    mass += out[v];
  }
  return mass;
}

accept_result accept_sampled(std::span<const std::int32_t> drafts, std::span<const float> p, std::span<const float> q,
                             std::int64_t vocab, const std::function<double()>& uniform, std::span<float> scratch) {
  check_drafts(drafts, vocab, "accept_sampled");
  check_rows(p.size(), drafts.size() + 1, vocab, "accept_sampled", "p");
  check_rows(q.size(), drafts.size(), vocab, "accept_sampled", "q");
  check_rows(scratch.size(), 1, vocab, "accept_sampled", "scratch");
  accept_result r;
  for (std::size_t i = 0; i < drafts.size(); ++i) {
    const float* pi = p.data() + i * std::size_t(vocab);
    const float* qi = q.data() + i * std::size_t(vocab);
    const std::int32_t x = drafts[i];
    // Keep x with probability min(1, p(x) / q(x)): u < p/q, written without
    // the division so q(x) = 0 (a draw q could not make) is simply rejected.
    if (uniform() * double(qi[x]) < double(pi[x])) {
      r.tokens.push_back(x);
      ++r.accepted;
      continue;
    }
    const double mass = residual_distribution(pi, qi, vocab, scratch.data());
    // A rejection implies p(x) < q(x), hence mass > 0; only rounding of p
    // and q that sum to 1 can leave none, and then p itself is the answer.
    const float* from = mass > 0 ? scratch.data() : pi;
    r.tokens.push_back(std::int32_t(kc::sample_categorical(from, vocab, uniform())));
    return r;
  }
  const float* bonus = p.data() + drafts.size() * std::size_t(vocab);
  r.tokens.push_back(std::int32_t(kc::sample_categorical(bonus, vocab, uniform())));
  return r;
}

}  // namespace specpipe
