#include "actors/batch_former.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace specpipe {

batch_former::batch_former(batch_capacity capacity, batch_policy policy)
    : capacity_(capacity), policy_(policy) {
  if (capacity.max_sequences <= 0 || capacity.max_tokens <= 0)
    throw std::invalid_argument("batch_former: max_sequences and max_tokens must be > 0, got " +
                                std::to_string(capacity.max_sequences) + " and " +
                                std::to_string(capacity.max_tokens));
}

batch_plan batch_former::operator()(std::span<const batch_candidate> candidates) const {
  std::vector<batch_candidate> order(candidates.begin(), candidates.end());
  const bool decodes_first = std::holds_alternative<decode_first>(policy_);
  std::stable_sort(order.begin(), order.end(), [&](const batch_candidate& a, const batch_candidate& b) {
    if (decodes_first && a.phase != b.phase) return a.phase == seq_phase::decode;
    return a.arrival < b.arrival;
  });
  batch_plan plan;
  bool prompt_taken = false;
  for (const auto& c : order) {
    const bool seats = std::int32_t(plan.step.size()) < capacity_.max_sequences;
    const bool fits = plan.tokens + c.tokens <= capacity_.max_tokens;
    // A prompt that does not fit beside the decodes still joins as the
    // step's only prompt (the token cap is exceeded by at most one prompt),
    // or it would wait for as long as any sequence decodes.
    const bool oversized = c.phase == seq_phase::prefill && !prompt_taken;
    if (seats && (fits || plan.step.empty() || oversized)) {
      prompt_taken = prompt_taken || c.phase == seq_phase::prefill;
      plan.step.push_back(c);
      plan.tokens += c.tokens;
    } else {
      plan.waiting.push_back(c);
    }
  }
  return plan;
}

}  // namespace specpipe
