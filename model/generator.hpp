#pragma once
// The decode loop for one sequence: prefill the prompt, then sample token by
// token until EOS, a stop string or the token limit. Text is streamed in
// deltas that never split a UTF-8 character and never show text that may
// still turn out to be the start of a stop string.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/cache_policy.hpp"
#include "model/forward.hpp"
#include "model/sampler.hpp"
#include "model/spec_stats.hpp"
#include "model/text_stream.hpp"
#include "model/tokenizer.hpp"

namespace specpipe {

struct generation_request {
  std::vector<std::int32_t> prompt;
  std::int32_t max_tokens = 128;
  sampling_params sampling;
  std::vector<std::string> stop;  // stop strings; not included in the output
  bool ignore_eos = false;
};

struct generation_result {
  std::vector<std::int32_t> tokens;  // generated ids (EOS excluded)
  std::string text;
  std::string finish_reason;  // "stop" (EOS or stop string) or "length"
  std::int64_t prompt_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;        // from the first sampled token to the last
  std::int64_t decode_forwards = 0;  // decode steps in decode_seconds (one forward each, or one speculative round)
  spec_decode_stats spec;            // speculative decoding's counters (empty otherwise)
};

// Called with each new piece of text, in order; concatenated they equal
// result.text.
using text_sink = std::function<void(std::string_view delta)>;

// What the decode loop needs from a backend, for one sequence: run the
// prompt, run one token, and pick the next token from the last forward's
// logits. The CPU backend samples on the host (sampler); the CUDA one on the
// device (cuda_forward::select), so the loop is shared and only token ids
// cross to the host.
class decode_backend {
 public:
  virtual ~decode_backend() = default;
  virtual std::int64_t vocab_size() const = 0;
  virtual std::int64_t length() const = 0;  // tokens in the sequence's cache
  virtual void prefill(std::span<const std::int32_t> tokens) = 0;
  virtual void step(std::int32_t token) = 0;
  // The draw for the `index`-th generated token (0 after the prefill).
  virtual std::int32_t pick(std::int64_t index) = 0;
};

// cpu_forward over a cache_policy, sampling with `sampling` on the host.
class cpu_decode_backend final : public decode_backend {
 public:
  cpu_decode_backend(cpu_forward& fwd, cache_policy& cache, const sampling_params& sampling);
  std::int64_t vocab_size() const override;
  std::int64_t length() const override;
  void prefill(std::span<const std::int32_t> tokens) override;
  void step(std::int32_t token) override;
  std::int32_t pick(std::int64_t index) override;

 private:
  cpu_forward& fwd_;
  cache_policy& cache_;
  sampler sampler_;
  std::vector<float> logits_;
};

// Validates the request against the model (empty prompt, token ids, prompt
// longer than max_context) and throws std::invalid_argument naming the field.
// The backend samples with its own parameters; req.sampling is validated.
generation_result generate(decode_backend& backend, const tokenizer& tok, const std::vector<std::int32_t>& eos_ids,
                           const generation_request& req, std::int64_t max_context, const text_sink& on_text = {});

// The CPU path: generate() over a cpu_decode_backend sampling with req.sampling.
generation_result generate(cpu_forward& fwd, cache_policy& cache, const tokenizer& tok,
                           const std::vector<std::int32_t>& eos_ids, const generation_request& req,
                           std::int64_t max_context, const text_sink& on_text = {});

}  // namespace specpipe
