#pragma once
// `specpipe generate --device cuda`. full, kivi, hier and quantspec run
// through the actor pipeline like the CPU backend (the worker's compute is
// cuda_forward on GPU 0: make_generate_cuda_compute,
// make_generate_cuda_quantspec_compute). SpeCache (run_generate_cuda) drives
// cuda_forward directly, through the same decode loop (stop strings, EOS,
// streaming) and with the same output: the prompt, the streamed text, and
// one timing line on stderr.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/quantspec_step_compute.hpp"
#include "actors/step_compute.hpp"
#include "model/draft_weights.hpp"
#include "model/gamma_controller.hpp"
#include "model/generator.hpp"
#include "model/kv_mode.hpp"
#include "model/model.hpp"

namespace specpipe::apps {

// --kv specache on the GPU. gpu_memory_gib > 0: refuse (usage_error) a run
// whose weights, caches and scratch would exceed that many GiB of device
// memory. trace_file non-empty: write a Chrome trace of the run there (spans
// of the prefill and of each step, or each QuantSpec round's draft and
// verify, on the host clock; every span ends with the device synchronized,
// so it covers the GPU work; with SpeCache, CUDA-event spans of each layer,
// top-k and fetch on their streams). std::logic_error for other modes.
int run_generate_cuda(const model& m, const generation_request& req, const std::vector<std::int32_t>& eos_ids,
                      std::int64_t max_context, const std::string& prompt_text, const kv_mode& kv,
                      double gpu_memory_gib = 0, const std::string& trace_file = {});

// The step compute of `generate --device cuda` for full, kivi and hier
// (actors/cuda_step_compute.hpp: cuda_forward on GPU 0 behind the pipeline's
// worker), one sequence of `max_context` tokens; refuses (usage_error) what
// exceeds gpu_memory_gib > 0.
std::shared_ptr<step_compute> make_generate_cuda_compute(const model& m, std::int64_t max_context, const kv_mode& kv,
                                                         double gpu_memory_gib);

// The step compute of `generate --device cuda --kv quantspec`
// (actors/cuda_quantspec_step_compute.hpp), one sequence of
// opts.max_context tokens; usage_error for what the GPU rounds cannot run
// (--draft-lm-head, a group other than 32/64/128) or what exceeds
// gpu_memory_gib > 0.
std::shared_ptr<step_compute> make_generate_cuda_quantspec_compute(const model& m,
                                                                   const quantspec_step_options& opts,
                                                                   double gpu_memory_gib);

}  // namespace specpipe::apps
