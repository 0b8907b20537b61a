#pragma once
// The GPU backend's SpeCache compute: cuda_forward with its host store and
// top-k fetch (model/cuda_forward.hpp, "SpeCache") behind the pipeline's
// worker. The planner and the transfer run on the forward's own CUDA streams
// inside each step (the rows a step reads are fetched while the step before
// computes), so the pipeline's planner actor takes no part: the compute
// picks every token itself on the device (the real rows with the request's
// sampling, the speculative rows greedily) and returns it in
// step_output::tokens. The decode entries of a step run as one batched
// forward: per sequence the real token and the speculative one (--prefetch
// speculative, after a one-row predecode at the first step), or one row
// whose rows are fetched after its query is known (--prefetch output).
// Outputs carry SpeCache's counters (hit rate against each real row's own
// top-k, speculative-token matches, rows fetched) and, with `timeline`, the
// per-layer GPU spans of compute, top-k and fetch on their streams' tracks.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "actors/step_compute.hpp"
#include "model/config.hpp"
#include "model/kv_mode.hpp"
#include "model/weights.hpp"

namespace specpipe {

struct cuda_specache_step_options {
  int device = 0;
  std::int64_t max_context = 0;  // tokens per sequence cache (and host store)
  int max_sequences = 1;         // cache slots: sequences at once, and the largest decode batch
  kv_mode kv;                    // specache (its bits, top-k, prefetch, group, window)
  bool timeline = false;         // per-layer GPU spans in the outputs (steps then run eagerly)
};

// Uploads the weights on the calling thread and allocates the pinned host
// store. Throws std::invalid_argument for options it cannot run (naming
// them) and std::runtime_error without a device.
std::shared_ptr<step_compute> make_cuda_specache_step_compute(const model_config& config,
                                                              const model_weights& weights,
                                                              const cuda_specache_step_options& opts);

// Device bytes such a compute allocates (weights, caches, scratch, SpeCache's
// fetch buffers), and the pinned host bytes of its store.
std::size_t cuda_specache_step_device_bytes(const model_config& config, const cuda_specache_step_options& opts);
std::size_t cuda_specache_step_host_bytes(const model_config& config, const cuda_specache_step_options& opts);

}  // namespace specpipe
