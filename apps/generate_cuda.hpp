#pragma once
// `specpipe generate --device cuda`. full, kivi and hier run through the
// actor pipeline like the CPU backend (make_generate_cuda_compute: the
// worker's compute is cuda_forward on GPU 0). SpeCache (run_generate_cuda)
// and QuantSpec (run_generate_cuda_quantspec) drive cuda_forward directly,
// through the same decode loop (stop strings, EOS, streaming) and with the
// same output: the prompt, the streamed text, and one timing line on stderr.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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

// --kv quantspec on the GPU (model/cuda_quantspec.hpp): the draft's 4-bit
// copies quantized on the device, a hierarchical cache of group kv_group,
// rounds of `gamma` drafts; the QuantSpec counters and the draft's memory
// on stderr after the timing line.
int run_generate_cuda_quantspec(const model& m, const generation_request& req,
                                const std::vector<std::int32_t>& eos_ids, std::int64_t max_context,
                                const std::string& prompt_text, std::int64_t kv_group, const draft_options& draft,
                                const gamma_options& gamma, double gpu_memory_gib = 0,
                                const std::string& trace_file = {});

}  // namespace specpipe::apps
