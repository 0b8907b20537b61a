#pragma once
// One sequence's forward passes through a KV cache mode, for the code that
// drives a model token by token without the actor pipeline (evaluation,
// tests): the prompt once, then one token per step. Plain cache policies run
// as cpu_forward calls; methods whose decode step is more than one forward
// over a cache (SpeCache's two-row step and its prefetch) implement the same
// interface (model/specache_session.hpp).
#include <cstdint>
#include <memory>
#include <span>

#include "model/cache_policy.hpp"
#include "model/forward.hpp"

namespace specpipe {

class decode_session {
 public:
  virtual ~decode_session() = default;
  // Tokens whose K/V the session holds (the next token's position).
  virtual std::int64_t length() const = 0;
  // Runs the prompt; logits ([vocab]) predict the token after it.
  virtual void prefill(std::span<const std::int32_t> tokens, std::span<float> logits) = 0;
  // Runs one token at position length(); logits predict the next one.
  virtual void step(std::int32_t token, std::span<float> logits) = 0;
};

// cpu_forward over `cache`, one forward per call. `fwd` must outlive it.
std::unique_ptr<decode_session> make_cache_session(cpu_forward& fwd, std::unique_ptr<cache_policy> cache);

}  // namespace specpipe
