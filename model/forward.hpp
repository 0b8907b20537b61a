#pragma once
// The Llama-family forward pass on the CPU backend: embedding, per layer
// RMSNorm -> Q/K/V -> RoPE -> cache append + attend -> O -> residual ->
// RMSNorm -> SwiGLU MLP -> residual, then final norm and lm_head. f32 math
// over f32/f16/bf16 weights, or packed 4-bit projections (a weight_set per
// call: QuantSpec's draft). Talks to the KV cache only through cache_policy.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/cache_policy.hpp"
#include "model/config.hpp"
#include "model/weight_set.hpp"
#include "model/weights.hpp"

namespace specpipe {

namespace kernels::cpu { class thread_pool; }

class cpu_forward {
 public:
  // threads <= 0: hardware concurrency.
  cpu_forward(const model_config& config, const model_weights& weights, int threads = 0);
  ~cpu_forward();

  // Runs `tokens` at positions cache.length(0) .. +n-1, appending their K/V.
  // Logits go to `logits`: [n, vocab] when all_logits, else [1, vocab] for the
  // last token. `logits` must hold that many floats. `projections` replaces
  // the checkpoint's linear layers (and lm_head) for this call, e.g. the
  // 4-bit draft's; embedding and norms always come from the weights given at
  // construction. Null: the checkpoint's own (the target).
  void forward(std::span<const std::int32_t> tokens, cache_policy& cache, std::span<float> logits,
               bool all_logits = false, const weight_set* projections = nullptr);

  const model_config& config() const { return config_; }
  kernels::cpu::thread_pool& pool() { return *pool_; }

 private:
  struct scratch;  // activations, sized for the largest batch seen so far

  model_config config_;
  const model_weights& weights_;
  weight_set target_;  // dense views of weights_
  std::vector<float> inv_freq_;
  std::unique_ptr<kernels::cpu::thread_pool> pool_;
  std::unique_ptr<scratch> scratch_;
};

// Full-precision KV cache in host memory (f32 rows), the reference policy.
std::unique_ptr<cache_policy> make_full_cache(const model_config& config, std::int64_t max_tokens,
                                              kernels::cpu::thread_pool* pool = nullptr);

}  // namespace specpipe
