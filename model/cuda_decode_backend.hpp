#pragma once
// The decode loop's backend (model/generator.hpp) on the GPU: one slot of a
// cuda_forward, tokens picked on the device (greedy or sampled with the
// counter-based generator, draw counter = index of the generated token).
#include "model/cuda_forward.hpp"
#include "model/generator.hpp"

namespace specpipe {

class cuda_decode_backend final : public decode_backend {
 public:
  // `fwd` must outlive this object; `slot` is the sequence's cache slot.
  cuda_decode_backend(cuda_forward& fwd, int slot, const sampling_params& sampling);
  std::int64_t vocab_size() const override;
  std::int64_t length() const override;
  void prefill(std::span<const std::int32_t> tokens) override;
  void step(std::int32_t token) override;
  std::int32_t pick(std::int64_t index) override;

 private:
  cuda_forward& fwd_;
  int slot_;
  sampling_params sampling_;
};

}  // namespace specpipe
