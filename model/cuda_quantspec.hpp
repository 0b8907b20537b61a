#pragma once
// QuantSpec's self-speculative decoding on the GPU (the CUDA twin of
// model/quantspec.hpp): one cuda_forward over a hierarchical INT4/INT8 cache
// and one cuda_model holding both weight sets. A round, for every slot of a
// batch in lockstep:
//   draft   gamma decode steps with the 4-bit projections reading the upper
//           nibbles (INT4 KV), each appending its row to the cache's
//           full-precision double buffer;
//   rollback the drafts' rows (window rows only: nothing re-quantized);
//   verify  one extend() of the pending token and the gamma drafts with the
//           16-bit projections over INT8 KV: gamma + 1 rows per slot whose
//           attention shares each code load (packed multi-query blocks);
//   accept  greedy (argmax on the device, only ids cross) or rejection
//           sampling on the host (model/speculative_accept.hpp) for
//           temperature > 0, then the target rows of rejected drafts are
//           rolled back. The next round starts from the correction or bonus.
// Rolling back gamma draft rows is legal for gamma <= G (model/quantspec.hpp
// explains why); the forward needs kv_max_append and max_step_tokens >=
// gamma + 1.
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <vector>

#include "model/cuda_forward.hpp"
#include "model/gamma_controller.hpp"
#include "model/generator.hpp"
#include "model/quantspec.hpp"
#include "model/sampler.hpp"
#include "model/spec_stats.hpp"

namespace specpipe {

class cuda_quantspec {
 public:
  // `fwd` must use a hier cache over a model with draft weights
  // (cuda_model::make_draft) and outlive this object. Throws
  // std::invalid_argument naming what does not fit (cache mode, a fixed
  // gamma above G or above what one extend() may append; an adaptive gamma
  // is capped there instead).
  cuda_quantspec(cuda_forward& fwd, const sampling_params& sampling, const gamma_options& gamma);

  // Prefills `prompt` into `slot` with the target (INT8 reads, 16-bit
  // weights) and picks the first token from its last logits.
  std::int32_t prefill(int slot, std::span<const std::int32_t> prompt);

  // One round for each slot from pending[i], its last picked token (not yet
  // in the cache). gamma is cut so every slot stays within the forward's
  // max_context (0: a plain target step). Throws std::length_error when a
  // slot has no room for even the pending token.
  std::vector<quantspec_round> round(std::span<const int> slots, std::span<const std::int32_t> pending);

  const spec_decode_stats& stats() const { return stats_; }
  const gamma_controller& controller() const { return gamma_; }

  // Called after each round with the slots' rounds (e.g. to trace their draft
  // and verify spans); empty: none.
  using round_observer = std::function<void(const std::vector<quantspec_round>&)>;
  void on_round(round_observer f) { observer_ = std::move(f); }

 private:
  cuda_forward& fwd_;
  sampler sampler_;
  gamma_controller gamma_;
  spec_decode_stats stats_;
  int limit_ = 0;            // the most drafts per round (G, kv_max_append - 1, max_step_tokens - 1)
  std::uint64_t draws_ = 0;  // device sampling counter (prefill's first token)
  std::vector<float> logits_, q_, p_, scratch_;
  round_observer observer_;
};

// The decode loop's backend (model/generator.hpp) over one slot: each pick()
// that finds no token left runs a round, whose kept drafts are already in
// the cache when step() is handed them; the correction or bonus token
// becomes the next round's pending token.
class cuda_quantspec_backend final : public decode_backend {
 public:
  cuda_quantspec_backend(cuda_quantspec& qs, cuda_forward& fwd, int slot);
  std::int64_t vocab_size() const override;
  std::int64_t length() const override;
  void prefill(std::span<const std::int32_t> tokens) override;
  void step(std::int32_t token) override;
  std::int32_t pick(std::int64_t index) override;

 private:
  cuda_quantspec& qs_;
  cuda_forward& fwd_;
  int slot_;
  std::int32_t first_ = -1;       // the prefill's token, until picked
  std::int32_t pending_ = -1;     // the token a round starts from
  std::deque<std::int32_t> ready_;  // a round's tokens not yet picked
  int in_cache_ = 0;              // picked tokens of the round already in the cache
};

}  // namespace specpipe
