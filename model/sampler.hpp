#pragma once
// Token selection from logits: greedy (temperature 0), or temperature with
// optional top-k and top-p (nucleus) filtering, from a seeded generator so runs
// are reproducible.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace specpipe {

struct sampling_params {
  float temperature = 0.8f;  // 0 = greedy
  float top_p = 1.0f;        // (0, 1]
  std::int32_t top_k = 0;    // 0 = off
  std::uint64_t seed = 0;

  // Throws std::invalid_argument naming the field when out of range.
  void validate() const;
};

class sampler {
 public:
  explicit sampler(const sampling_params& p);
  std::int32_t sample(std::span<const float> logits);

  // The pieces of sample(), for speculative decoding, which needs the
  // distributions themselves (model/speculative_accept.hpp) and draws from
  // the same seeded generator so a sequence stays reproducible.
  const sampling_params& params() const { return params_; }
  bool greedy() const { return params_.temperature == 0.0f; }
  // The distribution sample() draws from at temperature > 0 (top-k,
  // temperature, top-p applied; sums to 1); at temperature 0 the one-hot
  // vector of the argmax. probs must hold logits.size() floats.
  void distribution(std::span<const float> logits, std::span<float> probs);
  // Uniform in [0, 1) from the sampler's generator.
  double uniform();
  // An index drawn from probs (non-negative, not necessarily normalized).
  std::int32_t draw(std::span<const float> probs);

 private:
  sampling_params params_;
  std::mt19937_64 rng_;
  // Reused across calls so sampling a token allocates nothing after the first.
  std::vector<float> probs_;
  std::vector<float> scratch_;
  std::vector<std::int32_t> order_;
};

}  // namespace specpipe
