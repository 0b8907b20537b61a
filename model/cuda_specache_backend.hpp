#pragma once
// The decode loop's backend (model/generator.hpp) for SpeCache on the GPU:
// one slot of a cuda_forward with specache_fetch. Each step is the method's
// two-row forward (the first one preceded by the predecode that seeds the
// rows), or with prefetch `output` the ablation's one-row step. The real
// row's token is picked as cuda_decode_backend picks it; the speculative
// token is the speculative row's argmax, as on the CPU (specache_session).
#include "model/cuda_forward.hpp"
#include "model/generator.hpp"
#include "model/specache_session.hpp"
#include "model/specache_stats.hpp"

namespace specpipe {

class cuda_specache_backend final : public decode_backend {
 public:
  // `fwd` must outlive this object and have specache_fetch on.
  cuda_specache_backend(cuda_forward& fwd, int slot, const sampling_params& sampling, specache_prefetch prefetch);
  std::int64_t vocab_size() const override;
  std::int64_t length() const override;
  void prefill(std::span<const std::int32_t> tokens) override;
  void step(std::int32_t token) override;
  std::int32_t pick(std::int64_t index) override;

  // Steps, speculative-token matches and rows fetched (2 * head_dim bf16
  // each). The top-k hit rate needs the exact keys' top-k, which the GPU
  // path does not compute: needed and hits stay 0.
  const specache_stats& stats() const { return stats_; }

 private:
  cuda_forward& fwd_;
  int slot_;
  sampling_params sampling_;
  specache_prefetch prefetch_;
  specache_stats stats_;
  bool have_spec_ = false;
  std::int32_t spec_ = 0;
  std::int64_t guess_pos_ = -1;
  std::int32_t guess_token_ = 0;
};

}  // namespace specpipe
