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

  // Steps, speculative-token matches, rows fetched (2 * head_dim bf16
  // each) and, with the forward's specache_hit_rate, the top-k hit rate: of
  // the positions each real row's own top-k needed (from its attention of
  // that step: fetched rows exact, the rest low-bit; the CPU ranks the exact
  // 16-bit keys instead), the share already fetched.
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
