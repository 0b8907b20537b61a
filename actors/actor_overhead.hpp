#pragma once
// What the actors cost per decode step: the same greedy decode timed as bare
// forward calls (cpu_forward, or cuda_forward on GPU 0 with the logits copied
// to the host as the worker does) and through the whole pipeline (scheduler
// -> worker -> store, tracing off). `specpipe bench --actors` prints it.
#include <cstdint>
#include <ostream>
#include <vector>

#include "model/config.hpp"
#include "model/weights.hpp"

namespace specpipe {

struct actor_overhead_result {
  const char* device = "CPU";
  std::int64_t decode_steps = 0;  // per round
  int rounds = 0;
  double bare_step_us = 0;       // mean cpu_forward time of one decode token, best round
  double actor_step_us = 0;      // mean wall time per decode token through the actors, best round
  double overhead_pct = 0;       // (actor - bare) / bare * 100
  double worker_step_us = 0;     // mean forward time inside the worker, in the best actor round
  double message_share_pct = 0;  // of the best actor step, what the worker's forward does not explain, %
  bool same_tokens = false;      // both paths produced the same greedy tokens in every round
};

actor_overhead_result measure_actor_overhead(const model_config& config, const model_weights& weights,
                                             const std::vector<std::int32_t>& prompt, std::int32_t decode_tokens,
                                             int threads = 0, int rounds = 5);

// The same on GPU 0 (throws std::runtime_error without a device).
actor_overhead_result measure_actor_overhead_cuda(const model_config& config, const model_weights& weights,
                                                  const std::vector<std::int32_t>& prompt, std::int32_t decode_tokens,
                                                  int rounds = 5);

void print_actor_overhead(std::ostream& os, const actor_overhead_result& r);

}  // namespace specpipe
