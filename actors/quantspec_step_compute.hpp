#pragma once
// The CPU backend's QuantSpec compute (model/quantspec.hpp): per sequence a
// hierarchical INT4/INT8 cache and a decoder holding the sequence's sampler
// and gamma controller. A prefill runs the prompt through the target and
// picks the first token; each decode step is one round (draft gamma tokens,
// verify gamma + 1 positions) and returns the kept drafts plus the target's
// correction or bonus token in step_output::tokens, the accepted positions'
// target K/V rows for the host store, the round's counters and its draft and
// verify spans.
#include <cstdint>
#include <memory>

#include "actors/step_compute.hpp"
#include "model/config.hpp"
#include "model/draft_weights.hpp"
#include "model/gamma_controller.hpp"
#include "model/quantspec.hpp"
#include "model/weights.hpp"

namespace specpipe {

struct quantspec_step_options {
  std::int64_t max_context = 0;  // tokens per sequence cache
  int threads = 0;               // cpu_forward threads; 0 = all cores
  std::int64_t kv_group = 128;   // G of the hierarchical cache (its double buffer holds 2G)
  draft_options draft;           // the 4-bit weights
  gamma_options gamma;           // fixed or adaptive draft length
};

// A round's outcome into a step output (CPU and GPU computes): its tokens,
// its counters, and its draft and verify spans on the trace clock.
void record_round(const quantspec_round& r, seq_id seq, step_output& out);

// Quantizes the draft weights once (on the compute's pool). `weights` must
// outlive the compute. Throws std::invalid_argument on bad options.
std::shared_ptr<step_compute> make_quantspec_step_compute(const model_config& config, const model_weights& weights,
                                                          const quantspec_step_options& opts);

}  // namespace specpipe
