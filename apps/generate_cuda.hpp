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

#include "model/generator.hpp"
#include "model/kv_mode.hpp"
#include "model/model.hpp"

namespace specpipe::apps {

int run_generate_cuda(const model& m, const generation_request& req, const std::vector<std::int32_t>& eos_ids,
                      std::int64_t max_context, const std::string& prompt_text, const kv_mode& kv);

}  // namespace specpipe::apps
