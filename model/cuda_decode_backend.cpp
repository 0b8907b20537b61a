#include "model/cuda_decode_backend.hpp"

namespace specpipe {

cuda_decode_backend::cuda_decode_backend(cuda_forward& fwd, int slot, const sampling_params& sampling)
    : fwd_(fwd), slot_(slot), sampling_(sampling) {
  sampling_.validate();
}

std::int64_t cuda_decode_backend::vocab_size() const { return fwd_.config().vocab_size; }
std::int64_t cuda_decode_backend::length() const { return fwd_.length(slot_); }
void cuda_decode_backend::prefill(std::span<const std::int32_t> tokens) { fwd_.prefill(slot_, tokens); }
void cuda_decode_backend::step(std::int32_t token) { fwd_.decode(std::span(&slot_, 1), std::span(&token, 1)); }

std::int32_t cuda_decode_backend::pick(std::int64_t index) {
  std::int32_t out = 0;
  fwd_.select(sampling_, std::uint64_t(index), std::span(&out, 1));
  return out;
}

}  // namespace specpipe
