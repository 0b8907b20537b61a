#pragma once
// SpeCache on the CPU backend's worker (DESIGN.md): per sequence a
// specache_cache (the low-bit copy and window, the "GPU" side), whose link
// here talks to the pipeline: each layer's speculative probabilities go to
// the planner as the step runs (so the gathers for the next step overlap the
// rest of this one), and a layer's fetched rows are waited for just before
// that layer's attention reads them. The 16-bit rows of every kept token go
// to the host store as kv_rows. After a prefill the worker's pick is followed
// by the pre-decoding forward (picked()).
#include <cstdint>
#include <memory>

#include "actors/step_compute.hpp"
#include "model/config.hpp"
#include "model/specache_session.hpp"
#include "model/weights.hpp"

namespace specpipe {

struct specache_step_options {
  std::int64_t max_context = 0;  // tokens per sequence
  int threads = 0;               // cpu_forward threads; 0 = all cores
  specache_config config;
};

// `weights` must outlive the compute.
std::shared_ptr<step_compute> make_specache_step_compute(const model_config& config, const model_weights& weights,
                                                         const specache_step_options& opts);

}  // namespace specpipe
