#pragma once
// `specpipe generate --device cuda`: the step computes of the actor
// pipeline's worker on GPU 0 (cuda_forward behind actors/cuda_*_step_compute),
// for every cache mode, with the --gpu-memory check made before anything is
// allocated.
#include <cstdint>
#include <memory>

#include "actors/quantspec_step_compute.hpp"
#include "actors/step_compute.hpp"
#include "model/kv_mode.hpp"
#include "model/model.hpp"
#include "model/specache_stats.hpp"

namespace specpipe::apps {

// full, kivi, hier (actors/cuda_step_compute.hpp) and specache
// (actors/cuda_specache_step_compute.hpp; `timeline`: per-layer GPU spans
// for --trace), one sequence of `max_context` tokens; refuses (usage_error)
// what exceeds gpu_memory_gib > 0.
std::shared_ptr<step_compute> make_generate_cuda_compute(const model& m, std::int64_t max_context, const kv_mode& kv,
                                                         double gpu_memory_gib, bool timeline = false);

// --kv quantspec (actors/cuda_quantspec_step_compute.hpp), one sequence of
// opts.max_context tokens; usage_error for what the GPU rounds cannot run
// (a group other than 32/64/128, a fixed gamma past 15) or what exceeds
// gpu_memory_gib > 0.
std::shared_ptr<step_compute> make_generate_cuda_quantspec_compute(const model& m,
                                                                   const quantspec_step_options& opts,
                                                                   double gpu_memory_gib);

// SpeCache's line on stderr after the timing line, GPU flavour: the prefetch
// mode and top-k, the hit rate (each real row against its own top-k of the
// step), speculative-token matches, bytes fetched and the host store's size.
void print_gpu_specache_line(const model& m, std::int64_t max_context, const kv_mode& kv, const specache_stats& s);

}  // namespace specpipe::apps
