#include "model/cuda_quantspec.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "model/speculative_accept.hpp"

namespace specpipe {

namespace {
using clock_type = std::chrono::steady_clock;
}  // namespace

cuda_quantspec::cuda_quantspec(cuda_forward& fwd, const sampling_params& sampling, const gamma_options& gamma)
    : fwd_(fwd), sampler_(sampling), gamma_(gamma) {
  const auto& o = fwd.options();
  if (o.kv.format != kv_format::hier)
    throw std::invalid_argument("quantspec: the forward's cache is " + o.kv.describe() +
                                "; QuantSpec needs the hierarchical INT4/INT8 cache (kv_format::hier)");
  // The most drafts a round can roll back and verify: the double buffer's
  // group, and one extend() of gamma + 1 rows.
  limit_ = int(std::min<std::int64_t>({o.kv.group, o.kv_max_append - 1, o.max_step_tokens - 1}));
  if (!gamma.adaptive && gamma.gamma > limit_)
    throw std::invalid_argument("quantspec: gamma " + std::to_string(gamma.gamma) + " exceeds the " +
                                std::to_string(limit_) + " drafts this forward can roll back and verify (G = " +
                                std::to_string(o.kv.group) + ", kv_max_append - 1 = " +
                                std::to_string(o.kv_max_append - 1) + ", max_step_tokens - 1 = " +
                                std::to_string(o.max_step_tokens - 1) + ")");
}

std::int32_t cuda_quantspec::prefill(int slot, std::span<const std::int32_t> prompt) {
  fwd_.set_draft_weights(false);
  fwd_.set_kv_read(8);
  const std::int64_t vocab = fwd_.config().vocab_size;
  if (sampler_.greedy()) {
    fwd_.prefill(slot, prompt);
    std::int32_t t = 0;
    fwd_.select(sampler_.params(), draws_++, std::span(&t, 1));
    return t;
  }
  logits_.resize(std::size_t(vocab));
  fwd_.prefill(slot, prompt, logits_);
  return sampler_.sample(logits_);
}

std::vector<quantspec_round> cuda_quantspec::round(std::span<const int> slots, std::span<const std::int32_t> pending) {
  const std::size_t b = slots.size();
  if (b == 0 || pending.size() != b)
    throw std::invalid_argument("quantspec: " + std::to_string(b) + " slots and " + std::to_string(pending.size()) +
                                " pending tokens");
  const std::int64_t vocab = fwd_.config().vocab_size, cap = fwd_.options().max_context;
  const auto V = std::size_t(vocab);
  std::vector<std::int64_t> base(b);
  std::int64_t room = cap;
  for (std::size_t i = 0; i < b; ++i) {
    base[i] = fwd_.length(slots[i]);
    if (base[i] + 1 > cap)
      throw std::length_error("quantspec: slot " + std::to_string(slots[i]) + " holds " + std::to_string(base[i]) +
                              " of " + std::to_string(cap) + " tokens; no room for the next one");
    room = std::min(room, cap - base[i] - 1);
  }
  const int gamma = int(std::min<std::int64_t>({gamma_.gamma(), room, limit_}));
  const bool greedy = sampler_.greedy();
  std::vector<quantspec_round> rounds(b);
  std::vector<std::int32_t> drafts(b * std::size_t(gamma)), x(pending.begin(), pending.end());
  const auto draft_begin = clock_type::now();
  if (gamma > 0) {
    fwd_.set_draft_weights(true);
    fwd_.set_kv_read(4);
    if (!greedy) {
      logits_.resize(b * V);
      q_.resize(b * std::size_t(gamma) * V);
    }
    for (int j = 0; j < gamma; ++j) {
      if (greedy) {
        fwd_.decode(slots, x);
        fwd_.select(sampler_.params(), 0, x);
      } else {
        fwd_.decode(slots, x, logits_);
        for (std::size_t i = 0; i < b; ++i) {
          const std::span<float> qi(q_.data() + (i * std::size_t(gamma) + std::size_t(j)) * V, V);
          sampler_.distribution(std::span<const float>(logits_.data() + i * V, V), qi);
          x[i] = sampler_.draw(qi);
        }
      }
      for (std::size_t i = 0; i < b; ++i) drafts[i * std::size_t(gamma) + std::size_t(j)] = x[i];
    }
    for (std::size_t i = 0; i < b; ++i) fwd_.truncate(slots[i], base[i]);  // the target recomputes them
  }
  const auto verify_begin = clock_type::now();
  fwd_.set_draft_weights(false);
  fwd_.set_kv_read(8);
  const std::size_t n = std::size_t(gamma) + 1;
  std::vector<std::int32_t> tokens(b * n);
  for (std::size_t i = 0; i < b; ++i) {
    tokens[i * n] = pending[i];
    std::copy_n(drafts.begin() + std::ptrdiff_t(i * std::size_t(gamma)), gamma, tokens.begin() + std::ptrdiff_t(i * n + 1));
  }
  std::vector<accept_result> acc(b);
  if (greedy) {
    fwd_.extend(slots, std::int64_t(n), tokens);
    std::vector<std::int32_t> best(b * n);
    fwd_.select(sampler_.params(), 0, best);
    for (std::size_t i = 0; i < b; ++i) {  // accept_greedy on the device's argmax ids
      auto& a = acc[i];
      int k = 0;
      while (k < gamma && drafts[i * std::size_t(gamma) + std::size_t(k)] == best[i * n + std::size_t(k)]) ++k;
      a.tokens.assign(drafts.begin() + std::ptrdiff_t(i * std::size_t(gamma)),
                      drafts.begin() + std::ptrdiff_t(i * std::size_t(gamma) + std::size_t(k)));
      a.tokens.push_back(best[i * n + std::size_t(k)]);
      a.accepted = k;
    }
  } else {
    p_.resize(b * n * V);
    fwd_.extend(slots, std::int64_t(n), tokens, p_);
    scratch_.resize(V);
    for (std::size_t i = 0; i < b; ++i) {
      const std::span<float> pi(p_.data() + i * n * V, n * V);
      for (std::size_t r = 0; r < n; ++r) {
        const std::span<float> row(pi.data() + r * V, V);
        sampler_.distribution(row, row);
      }
      acc[i] = accept_sampled(std::span<const std::int32_t>(drafts.data() + i * std::size_t(gamma), std::size_t(gamma)),
                              pi, std::span<const float>(q_.data() + i * std::size_t(gamma) * V, std::size_t(gamma) * V),
                              vocab, [this] { return sampler_.uniform(); }, scratch_);
    }
  }
  for (std::size_t i = 0; i < b; ++i) fwd_.truncate(slots[i], base[i] + 1 + acc[i].accepted);
  const auto verify_end = clock_type::now();
  for (std::size_t i = 0; i < b; ++i) {
    auto& r = rounds[i];
    r.tokens = std::move(acc[i].tokens);
    r.drafted = gamma;
    r.accepted = acc[i].accepted;
    r.draft_begin = draft_begin;
    r.verify_begin = verify_begin;
    r.verify_end = verify_end;
    if (gamma > 0) {
      gamma_.observe(gamma, r.accepted, r.draft_seconds() / gamma, r.verify_seconds());
      stats_.add_round(gamma, r.accepted, r.draft_seconds(), r.verify_seconds());
    }
  }
  if (observer_) observer_(rounds);
  return rounds;
}

cuda_quantspec_backend::cuda_quantspec_backend(cuda_quantspec& qs, cuda_forward& fwd, int slot)
    : qs_(qs), fwd_(fwd), slot_(slot) {}

std::int64_t cuda_quantspec_backend::vocab_size() const { return fwd_.config().vocab_size; }
// The tokens the decode loop has stepped: the kept drafts it has not been
// handed yet are in the cache already, but not in its sequence.
std::int64_t cuda_quantspec_backend::length() const { return fwd_.length(slot_) - in_cache_; }

void cuda_quantspec_backend::prefill(std::span<const std::int32_t> tokens) {
  first_ = qs_.prefill(slot_, tokens);
  ready_.clear();
  in_cache_ = 0;
}

void cuda_quantspec_backend::step(std::int32_t token) {
  if (in_cache_ > 0) {  // a kept draft: the round appended it already
    --in_cache_;
    return;
  }
  pending_ = token;
}

std::int32_t cuda_quantspec_backend::pick(std::int64_t) {
  if (first_ >= 0) {
    const std::int32_t t = first_;
    first_ = -1;
    return t;
  }
  if (ready_.empty()) {
    if (pending_ < 0) throw std::logic_error("quantspec backend: pick() before a token was stepped");
    auto r = qs_.round(std::span(&slot_, 1), std::span(&pending_, 1));
    ready_.assign(r[0].tokens.begin(), r[0].tokens.end());
    in_cache_ = r[0].accepted;
    pending_ = -1;
  }
  const std::int32_t t = ready_.front();
  ready_.pop_front();
  return t;
}

}  // namespace specpipe
