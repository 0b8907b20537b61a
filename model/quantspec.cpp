#include "model/quantspec.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/sampling.hpp"
#include "model/speculative_accept.hpp"

namespace specpipe {

quantspec_decoder::quantspec_decoder(cpu_forward& fwd, const weight_set& draft, cache_policy& cache, hier_cache& hier,
                                     const sampling_params& sampling, const gamma_options& gamma, draft_parts parts)
    : fwd_(fwd), draft_(draft), parts_(parts), cache_(cache), hier_(hier), sampler_(sampling), gamma_(gamma) {}

std::int32_t quantspec_decoder::prefill(std::span<const std::int32_t> prompt) {
  const std::int64_t vocab = fwd_.config().vocab_size;
  p_.resize(std::size_t(vocab));
  hier_.set_read(hier_read::int8);
  fwd_.forward(prompt, cache_, p_);
  return sampler_.sample(std::span<const float>(p_.data(), std::size_t(vocab)));
}

quantspec_round quantspec_decoder::round(std::int32_t pending, std::int64_t max_length) {
  using clock = std::chrono::steady_clock;
  const std::int64_t vocab = fwd_.config().vocab_size;
  const auto V = std::size_t(vocab);
  const std::int64_t base = cache_.length(0);
  if (base + 1 > max_length)
    throw std::length_error("quantspec: the cache holds " + std::to_string(base) + " of " +
                            std::to_string(max_length) + " tokens; no room for the next one");
  // Rollback legality. The cache quantizes the oldest G window tokens before
  // an append whenever the window holds 2G, so at any flush at least G tokens
  // stay in full precision after it. The draft appends gamma rows one at a
  // time; when a flush happens before the k-th (k <= gamma - 1 drafts already
  // in), the window holds >= 2G tokens, its newest k are drafts, and the G
  // flushed are the oldest: drafts survive it as long as k <= G. So gamma <= G
  // rolls back without touching a quantized group. The verify appends its
  // gamma + 1 rows in one call, after any flush, so dropping up to gamma of
  // them is always legal.
  const int gamma = int(std::min<std::int64_t>({gamma_.gamma(), max_length - base - 1, hier_.group()}));

  quantspec_round r;
  drafts_.clear();
  r.draft_begin = clock::now();
  if (gamma > 0) {
    hier_.set_read(parts_.kv_int4 ? hier_read::int4 : hier_read::int8);
    draft_logits_.resize(V);
    if (!sampler_.greedy()) q_.resize(std::size_t(gamma) * V);
    std::int32_t x = pending;
    for (int i = 0; i < gamma; ++i) {
      fwd_.forward(std::span<const std::int32_t>(&x, 1), cache_, draft_logits_, false,
                   parts_.weights_4bit ? &draft_ : nullptr);
      if (sampler_.greedy()) {
        x = std::int32_t(kernels::cpu::argmax(draft_logits_.data(), vocab));
        if (x < 0) throw std::runtime_error("quantspec: the draft's logits are all NaN");
      } else {
        const std::span<float> qi(q_.data() + std::size_t(i) * V, V);
        sampler_.distribution(draft_logits_, qi);
        x = sampler_.draw(qi);
      }
      drafts_.push_back(x);
    }
    cache_.truncate(base);  // the draft's rows: the target recomputes them
  }

  r.verify_begin = clock::now();
  hier_.set_read(hier_read::int8);
  verify_tokens_.assign(1, pending);
  verify_tokens_.insert(verify_tokens_.end(), drafts_.begin(), drafts_.end());
  p_.resize(verify_tokens_.size() * V);
  fwd_.forward(verify_tokens_, cache_, p_, true);
  accept_result acc;
  if (sampler_.greedy()) {
    acc = accept_greedy(drafts_, p_, vocab);
  } else {
    for (std::size_t i = 0; i < verify_tokens_.size(); ++i) {
      const std::span<float> row(p_.data() + i * V, V);
      sampler_.distribution(row, row);
    }
    scratch_.resize(V);
    acc = accept_sampled(drafts_, p_, std::span<const float>(q_.data(), drafts_.size() * V), vocab,
                         [this] { return sampler_.uniform(); }, scratch_);
  }
  cache_.truncate(base + 1 + acc.accepted);  // keep the pending token and the kept drafts
  r.verify_end = clock::now();

  r.tokens = std::move(acc.tokens);
  r.drafted = gamma;
  r.accepted = acc.accepted;
  if (gamma > 0) {
    gamma_.observe(gamma, r.accepted, r.draft_seconds() / gamma, r.verify_seconds());
    stats_.add_round(gamma, r.accepted, r.draft_seconds(), r.verify_seconds());
  }
  return r;
}

}  // namespace specpipe
