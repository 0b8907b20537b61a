#include "model/generator.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace specpipe {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

}  // namespace

cpu_decode_backend::cpu_decode_backend(cpu_forward& fwd, cache_policy& cache, const sampling_params& sampling)
    : fwd_(fwd), cache_(cache), sampler_(sampling), logits_(std::size_t(fwd.config().vocab_size)) {}

std::int64_t cpu_decode_backend::vocab_size() const { return fwd_.config().vocab_size; }
std::int64_t cpu_decode_backend::length() const { return cache_.length(0); }
void cpu_decode_backend::prefill(std::span<const std::int32_t> tokens) { fwd_.forward(tokens, cache_, logits_); }
void cpu_decode_backend::step(std::int32_t token) { fwd_.forward(std::span(&token, 1), cache_, logits_); }
std::int32_t cpu_decode_backend::pick(std::int64_t) { return sampler_.sample(logits_); }

generation_result generate(decode_backend& backend, const tokenizer& tok, const std::vector<std::int32_t>& eos_ids,
                           const generation_request& req, std::int64_t max_context, const text_sink& on_text) {
  const std::int64_t vocab = backend.vocab_size();
  if (req.prompt.empty()) throw std::invalid_argument("prompt: is empty (nothing to condition on)");
  for (std::size_t i = 0; i < req.prompt.size(); ++i)
    if (req.prompt[i] < 0 || req.prompt[i] >= vocab)
      throw std::invalid_argument("prompt: token " + std::to_string(i) + " has id " +
                                  std::to_string(req.prompt[i]) + ", outside the vocabulary of " +
                                  std::to_string(vocab));
  if (std::int64_t(req.prompt.size()) + backend.length() > max_context)
    throw std::invalid_argument("prompt: " + std::to_string(req.prompt.size()) +
                                " tokens do not fit the context of " + std::to_string(max_context) +
                                " tokens");
  if (req.max_tokens < 0) throw std::invalid_argument("max_tokens: must be >= 0");
  req.sampling.validate();

  generation_result res;
  res.prompt_tokens = std::int64_t(req.prompt.size());

  auto t0 = clock_type::now();
  backend.prefill(req.prompt);
  res.prefill_seconds = seconds_since(t0);

  text_stream text(req.stop, [&tok](std::span<const std::int32_t> ids) { return tok.decode(ids); });
  auto t1 = clock_type::now();
  res.finish_reason = "length";
  for (std::int32_t step = 0; step < req.max_tokens; ++step) {
    const std::int32_t next = backend.pick(step);
    if (!req.ignore_eos && std::find(eos_ids.begin(), eos_ids.end(), next) != eos_ids.end()) {
      res.finish_reason = "stop";
      break;
    }
    const auto pushed = text.push(next);
    if (pushed.stopped) {
      res.finish_reason = "stop";
      break;
    }
    if (on_text && !pushed.delta.empty()) on_text(pushed.delta);
    if (step + 1 == req.max_tokens) break;
    if (backend.length() >= max_context) break;  // context full: finish with "length"
    backend.step(next);
    ++res.decode_forwards;
  }
  res.decode_seconds = seconds_since(t1);
  const std::string rest = text.flush();
  if (on_text && !rest.empty()) on_text(rest);
  res.tokens = text.tokens();
  res.text = text.text();
  return res;
}

generation_result generate(cpu_forward& fwd, cache_policy& cache, const tokenizer& tok,
                           const std::vector<std::int32_t>& eos_ids, const generation_request& req,
                           std::int64_t max_context, const text_sink& on_text) {
  cpu_decode_backend backend(fwd, cache, req.sampling);
  return generate(backend, tok, eos_ids, req, max_context, on_text);
}

}  // namespace specpipe
