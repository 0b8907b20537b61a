#pragma once
// QuantSpec's self-speculative decoding of one sequence (Tiwari et al. 2025,
// sec. 4; DESIGN.md). One model, two weight sets, one cache:
//   draft   the 4-bit projections (model/draft_weights.hpp) reading the
//           hierarchical cache's upper nibbles (INT4 KV)
//   target  the checkpoint's 16-bit projections reading upper and lower
//           nibbles (INT8 KV)
// A round drafts gamma tokens one at a time from the pending token (each
// draft token's K/V is appended to the cache's full-precision double buffer,
// where the next draft step attends to it), rolls those rows back, runs the
// target once over the pending token and the gamma drafts (gamma + 1
// positions, all logits), keeps the accepted prefix (model/speculative_accept.hpp)
// and rolls back the target rows of the rejected drafts. The next round
// starts from the target's correction or bonus token. Only the double buffer
// is ever rolled back: nothing is re-quantized (see round()).
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "model/cache_policy.hpp"
#include "model/forward.hpp"
#include "model/gamma_controller.hpp"
#include "model/hier_cache.hpp"
#include "model/sampler.hpp"
#include "model/spec_stats.hpp"
#include "model/weight_set.hpp"

namespace specpipe {

struct quantspec_round {
  std::vector<std::int32_t> tokens;  // kept drafts, then the correction or bonus token
  int drafted = 0;
  int accepted = 0;
  std::chrono::steady_clock::time_point draft_begin, verify_begin, verify_end;

  double draft_seconds() const { return std::chrono::duration<double>(verify_begin - draft_begin).count(); }
  double verify_seconds() const { return std::chrono::duration<double>(verify_end - verify_begin).count(); }
};

// Which of the draft's two approximations a decoder keeps: the paper's
// draft has both; turning one off isolates what the other costs in
// acceptance (`eval accept --draft-weights 16` / `--draft-kv 8`). With both
// off the draft is the target itself, and greedy verification accepts every
// draft.
struct draft_parts {
  bool weights_4bit = true;  // false: the checkpoint's 16-bit projections
  bool kv_int4 = true;       // false: the target's INT8 read of the cache
};

class quantspec_decoder {
 public:
  // `cache` is what the forwards append to and attend over; `hier` is the
  // hierarchical cache behind it (the same object, or the one `cache` wraps),
  // whose read the decoder switches between INT4 (draft) and INT8 (target).
  // All references must outlive the decoder. Throws std::invalid_argument on
  // bad sampling or gamma options.
  quantspec_decoder(cpu_forward& fwd, const weight_set& draft, cache_policy& cache, hier_cache& hier,
                    const sampling_params& sampling, const gamma_options& gamma, draft_parts parts = {});

  // Runs the prompt through the target (INT8 reads) and picks the first
  // token from its last logits.
  std::int32_t prefill(std::span<const std::int32_t> prompt);
  // One round from `pending`, the last picked token (not yet in the cache).
  // The verify appends gamma + 1 rows, so gamma is cut to keep the cache
  // within max_length tokens (gamma 0: a plain target step). Throws
  // std::length_error when not even the pending token fits.
  quantspec_round round(std::int32_t pending, std::int64_t max_length);

  const spec_decode_stats& stats() const { return stats_; }
  const gamma_controller& controller() const { return gamma_; }

 private:
  cpu_forward& fwd_;
  const weight_set& draft_;
  draft_parts parts_;
  cache_policy& cache_;
  hier_cache& hier_;
  sampler sampler_;
  gamma_controller gamma_;
  spec_decode_stats stats_;
  // Reused by every round.
  std::vector<float> draft_logits_, q_, p_, scratch_;
  std::vector<std::int32_t> drafts_, verify_tokens_;
};

}  // namespace specpipe
