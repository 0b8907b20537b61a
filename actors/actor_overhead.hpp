#pragma once
// What the actors cost per decode step on the CPU backend: the same greedy
// decode timed as bare cpu_forward calls and through the whole pipeline
// (scheduler -> worker -> store, tracing off). Callable from `specpipe bench`.
#include <cstdint>
#include <ostream>
#include <vector>

#include "model/config.hpp"
#include "model/weights.hpp"

namespace specpipe {

struct actor_overhead_result {
  std::int64_t decode_steps = 0;
  double bare_step_us = 0;       // mean cpu_forward time of one decode token
  double actor_step_us = 0;      // mean wall time per decode token through the actors
  double overhead_pct = 0;       // (actor - bare) / bare * 100
  double message_share_pct = 0;  // scheduler round trip not spent in the forward, % of the round trip
  bool same_tokens = false;      // both paths produced the same greedy tokens
};

actor_overhead_result measure_actor_overhead(const model_config& config, const model_weights& weights,
                                             const std::vector<std::int32_t>& prompt, std::int32_t decode_tokens,
                                             int threads = 0);

void print_actor_overhead(std::ostream& os, const actor_overhead_result& r);

}  // namespace specpipe
