#pragma once
// The CPU backend's step compute: cpu_forward over one full-precision cache
// per sequence (make_full_cache). Each step's new K/V rows are captured on
// their way into the cache and returned as f16 rows for the host store.
#include <cstdint>
#include <memory>

#include "actors/step_compute.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace specpipe {

struct cpu_step_options {
  std::int64_t max_context = 0;  // tokens per sequence cache
  int threads = 0;               // cpu_forward threads; 0 = all cores
};

// `weights` must outlive the compute (the worker holds it by reference).
std::shared_ptr<step_compute> make_cpu_step_compute(const model_config& config, const model_weights& weights,
                                                    const cpu_step_options& opts);

}  // namespace specpipe
