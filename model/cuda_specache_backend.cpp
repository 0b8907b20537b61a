#include "model/cuda_specache_backend.hpp"

#include <stdexcept>

namespace specpipe {

cuda_specache_backend::cuda_specache_backend(cuda_forward& fwd, int slot, const sampling_params& sampling,
                                             specache_prefetch prefetch)
    : fwd_(fwd), slot_(slot), sampling_(sampling), prefetch_(prefetch) {
  sampling_.validate();
  if (!fwd.options().specache_fetch)
    throw std::invalid_argument("cuda_specache_backend: the forward has no host store (specache_fetch off)");
}

std::int64_t cuda_specache_backend::vocab_size() const { return fwd_.config().vocab_size; }
std::int64_t cuda_specache_backend::length() const { return fwd_.length(slot_); }

void cuda_specache_backend::prefill(std::span<const std::int32_t> tokens) {
  fwd_.prefill(slot_, tokens);
  have_spec_ = false;
  guess_pos_ = -1;
}

void cuda_specache_backend::step(std::int32_t token) {
  const std::int64_t before = fwd_.specache_rows_fetched();
  const auto hits_before = fwd_.specache_hits();
  const std::int64_t pos = length();
  ++stats_.steps;
  if (prefetch_ == specache_prefetch::output) {
    fwd_.specache_output_step(std::span(&slot_, 1), std::span(&token, 1));
  } else {
    sampling_params greedy;
    greedy.temperature = 0.f;
    if (!have_spec_) {
      fwd_.specache_predecode(std::span(&slot_, 1), std::span(&token, 1));
      fwd_.select(greedy, 0, std::span(&spec_, 1));
      have_spec_ = true;
    }
    if (guess_pos_ == pos) {
      ++stats_.guesses;
      if (guess_token_ == token) ++stats_.guess_hits;
    }
    fwd_.specache_step(std::span(&slot_, 1), std::span(&token, 1), std::span(&spec_, 1));
    guess_pos_ = pos + 1;
    guess_token_ = spec_;
    fwd_.select(greedy, 0, std::span(&spec_, 1), 1, 1);  // the speculative row's argmax
  }
  const std::int64_t rows = fwd_.specache_rows_fetched() - before;
  stats_.rows_fetched += rows;
  stats_.bytes_fetched += rows * 4 * fwd_.config().head_dim;
  if (fwd_.options().specache_hit_rate) {
    const auto hits = fwd_.specache_hits();
    stats_.needed += hits.first - hits_before.first;
    stats_.hits += hits.second - hits_before.second;
  }
}

std::int32_t cuda_specache_backend::pick(std::int64_t index) {
  std::int32_t out = 0;
  fwd_.select(sampling_, std::uint64_t(index), std::span(&out, 1), 0, 1);
  return out;
}

}  // namespace specpipe
