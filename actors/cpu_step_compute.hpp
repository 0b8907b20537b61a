#pragma once
// The CPU backend's step compute: cpu_forward over one full-precision cache
// per sequence (make_full_cache unless the options name another factory). Each step's new K/V rows are captured on
// their way into the cache and returned as f16 rows for the host store.
#include <cstdint>
#include <functional>
#include <memory>

#include "actors/step_compute.hpp"
#include "model/cache_policy.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace specpipe {

namespace kernels::cpu { class thread_pool; }

struct cpu_step_options {
  std::int64_t max_context = 0;  // tokens per sequence cache
  int threads = 0;               // cpu_forward threads; 0 = all cores
  // Builds each sequence's cache (config, max_context, the forward's pool);
  // empty: make_full_cache. model/kv_mode.hpp's kv_cache_factory fits here.
  std::function<std::unique_ptr<cache_policy>(const model_config&, std::int64_t, kernels::cpu::thread_pool*)>
      make_cache;
};

// `weights` must outlive the compute (the worker holds it by reference).
std::shared_ptr<step_compute> make_cpu_step_compute(const model_config& config, const model_weights& weights,
                                                    const cpu_step_options& opts);

}  // namespace specpipe
