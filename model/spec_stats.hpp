#pragma once
// Counters of speculative decoding, per sequence or summed over a run, named
// like vLLM's spec-decode metrics (DESIGN.md, /metrics): drafts (rounds),
// draft tokens, accepted tokens, accepted tokens per draft position.
#include <cstdint>
#include <string>
#include <vector>

namespace specpipe {

struct spec_decode_stats {
  std::int64_t drafts = 0;           // rounds that proposed at least one token
  std::int64_t draft_tokens = 0;     // tokens proposed
  std::int64_t accepted_tokens = 0;  // proposed tokens the target kept
  std::int64_t rejections = 0;       // rounds that ended in a rejected draft (the others kept all)
  // [i]: rounds whose draft token at position i (0-based) was kept.
  std::vector<std::int64_t> accepted_per_position;
  double draft_seconds = 0;   // all draft forwards
  double verify_seconds = 0;  // all verify forwards

  void add_round(int drafted, int accepted, double draft_s, double verify_s);
  void merge(const spec_decode_stats& o);
  // accepted / proposed (0 without drafts). It falls with gamma even at a
  // fixed per-token rate, since a rejection ends the round.
  double acceptance_rate() const;
  // The per-token rate alpha of Leviathan et al.: accepted / (accepted +
  // rejections), the maximum-likelihood rate of runs cut at gamma; what the
  // papers' "acceptance rate" compares across gammas.
  double per_token_acceptance() const;
  // Tokens a round yields on average: kept drafts plus the target's
  // correction or bonus token (the "acceptance length" of the papers).
  double mean_acceptance_length() const;
  // "drafts 12, draft tokens 60, accepted 51 (85.0%, alpha 89.5%), mean acceptance length 5.25,
  // kept by position 100% 92% ..."
  std::string summary() const;
};

}  // namespace specpipe
