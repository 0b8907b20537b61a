#pragma once
// `specpipe generate --device cuda`: the model's weights uploaded as bf16,
// the prompt prefilled and the continuation decoded by cuda_forward (over
// the --kv cache: bf16 rows, or KIVI / SpeCache / hierarchical codes), through
// the same decode loop (stop strings, EOS, streaming) as the CPU path, with
// the same output: the prompt, the streamed text, and one timing line on
// stderr.
#include <cstdint>
#include <string>
#include <vector>

#include "model/draft_weights.hpp"
#include "model/gamma_controller.hpp"
#include "model/generator.hpp"
#include "model/kv_mode.hpp"
#include "model/model.hpp"

namespace specpipe::apps {

// gpu_memory_gib > 0: refuse (usage_error) a run whose weights, caches and
// scratch would exceed that many GiB of device memory. trace_file non-empty:
// write a Chrome trace of the run there (spans of the prefill and of each
// step, or each QuantSpec round's draft and verify, on the host clock; every
// span ends with the device synchronized, so it covers the GPU work; with
// SpeCache, CUDA-event spans of each layer, top-k and fetch on their streams).
int run_generate_cuda(const model& m, const generation_request& req, const std::vector<std::int32_t>& eos_ids,
                      std::int64_t max_context, const std::string& prompt_text, const kv_mode& kv,
                      double gpu_memory_gib = 0, const std::string& trace_file = {});

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
