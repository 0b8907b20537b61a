#include "model/spec_stats.hpp"

#include <algorithm>
#include <cstdio>

namespace specpipe {

void spec_decode_stats::add_round(int drafted, int accepted, double draft_s, double verify_s) {
  if (drafted <= 0) return;
  ++drafts;
  draft_tokens += drafted;
  accepted_tokens += accepted;
  if (accepted < drafted) ++rejections;
  if (accepted_per_position.size() < std::size_t(drafted)) accepted_per_position.resize(std::size_t(drafted), 0);
  for (int i = 0; i < accepted; ++i) ++accepted_per_position[std::size_t(i)];
  draft_seconds += draft_s;
  verify_seconds += verify_s;
}

void spec_decode_stats::merge(const spec_decode_stats& o) {
  drafts += o.drafts;
  draft_tokens += o.draft_tokens;
  accepted_tokens += o.accepted_tokens;
  rejections += o.rejections;
  if (accepted_per_position.size() < o.accepted_per_position.size())
    accepted_per_position.resize(o.accepted_per_position.size(), 0);
  for (std::size_t i = 0; i < o.accepted_per_position.size(); ++i)
    accepted_per_position[i] += o.accepted_per_position[i];
  draft_seconds += o.draft_seconds;
  verify_seconds += o.verify_seconds;
}

double spec_decode_stats::acceptance_rate() const {
  return draft_tokens > 0 ? double(accepted_tokens) / double(draft_tokens) : 0.0;
}

double spec_decode_stats::per_token_acceptance() const {
  const std::int64_t trials = accepted_tokens + rejections;
  return trials > 0 ? double(accepted_tokens) / double(trials) : 0.0;
}

double spec_decode_stats::mean_acceptance_length() const {
  return drafts > 0 ? double(accepted_tokens) / double(drafts) + 1.0 : 0.0;
}

std::string spec_decode_stats::summary() const {
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "drafts %lld, draft tokens %lld, accepted %lld (%.1f%%, alpha %.1f%%), mean acceptance length %.2f",
                static_cast<long long>(drafts), static_cast<long long>(draft_tokens),
                static_cast<long long>(accepted_tokens), 100.0 * acceptance_rate(), 100.0 * per_token_acceptance(),
                mean_acceptance_length());
  std::string s = buf;
  if (!accepted_per_position.empty()) {
    s += ", kept by position";
    for (const auto n : accepted_per_position) {
      std::snprintf(buf, sizeof buf, " %.0f%%", drafts > 0 ? 100.0 * double(n) / double(drafts) : 0.0);
      s += buf;
    }
  }
  return s;
}

}  // namespace specpipe
