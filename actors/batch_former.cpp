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
  for (const auto& c : order) {
    const bool seats = std::int32_t(plan.step.size()) < capacity_.max_sequences;
    const bool fits = plan.tokens + c.tokens <= capacity_.max_tokens;
    if (seats && (fits || plan.step.empty())) {
      plan.step.push_back(c);
      plan.tokens += c.tokens;
    } else {
      plan.waiting.push_back(c);
    }
  }
  return plan;
}

}  // namespace specpipe
