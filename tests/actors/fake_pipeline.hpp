#pragma once
// Pipeline options and requests for the fake compute's tests: a small
// context and store blocks, letters for text, greedy picks.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "actors/pipeline.hpp"

namespace specpipe::testing {

inline pipeline_options fake_options() {
  pipeline_options o;
  o.max_context = 256;
  o.block_tokens = 4;
  o.max_sequences_per_worker = 4;
  o.step_timeout = std::chrono::seconds(10);
  o.detokenize = [](std::span<const std::int32_t> ids) {
    std::string s;
    for (auto t : ids) s += char('a' + t % 26);
    return s;
  };
  o.make_picker = [](const sampling_params&) {
    return [](std::span<const float> logits) {
      return std::int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    };
  };
  return o;
}

inline generation_request request_of(std::vector<std::int32_t> prompt, int max_tokens) {
  generation_request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

}  // namespace specpipe::testing
