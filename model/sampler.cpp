#include "model/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/sampling.hpp"

namespace specpipe {

namespace kc = kernels::cpu;

void sampling_params::validate() const {
  if (!(temperature >= 0.0f) || std::isinf(temperature))
    throw std::invalid_argument("sampling_params.temperature must be a finite value >= 0, got " +
                                std::to_string(temperature));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    throw std::invalid_argument("sampling_params.top_p must be in (0, 1], got " +
                                std::to_string(top_p));
  if (top_k < 0)
    throw std::invalid_argument("sampling_params.top_k must be >= 0 (0 = off), got " +
                                std::to_string(top_k));
}

sampler::sampler(const sampling_params& p) : params_(p), rng_(p.seed) { params_.validate(); }

std::int32_t sampler::sample(std::span<const float> logits) {
  const auto n = std::int64_t(logits.size());
  if (n == 0) throw std::invalid_argument("sampler::sample: empty logits");
  if (params_.temperature == 0.0f) {
    const std::int64_t best = kc::argmax(logits.data(), n);
    if (best < 0) throw std::invalid_argument("sampler::sample: every logit is NaN");
    return std::int32_t(best);
  }
  probs_.resize(std::size_t(n));
  distribution(logits, probs_);
  return draw(probs_);
}

void sampler::distribution(std::span<const float> logits, std::span<float> probs) {
  const auto n = std::int64_t(logits.size());
  if (n == 0) throw std::invalid_argument("sampler::distribution: empty logits");
  if (probs.size() < logits.size())
    throw std::invalid_argument("sampler::distribution: probs holds " + std::to_string(probs.size()) +
                                " floats, logits " + std::to_string(logits.size()));
  if (params_.temperature == 0.0f) {
    const std::int64_t best = kc::argmax(logits.data(), n);
    if (best < 0) throw std::invalid_argument("sampler::distribution: every logit is NaN");
    std::fill(probs.begin(), probs.begin() + n, 0.0f);
    probs[std::size_t(best)] = 1.0f;
    return;
  }
  if (probs.data() != logits.data()) std::copy(logits.begin(), logits.end(), probs.begin());
  for (std::int64_t i = 0; i < n; ++i)
    if (std::isnan(probs[std::size_t(i)])) throw std::invalid_argument("sampler::sample: logits contain NaN");
  scratch_.resize(std::size_t(n));
  order_.resize(std::size_t(n));
  // HF's warper order: temperature, top-k, top-p. Temperature and the
  // softmax commute with top-k's ranking, so top-k runs first on raw logits.
  kc::top_k_filter(probs.data(), n, params_.top_k, scratch_.data());
  kc::softmax(probs.data(), n, params_.temperature, probs.data());
  kc::top_p_filter(probs.data(), n, params_.top_p, order_.data());
}

// generate_canonical: the same draws from the same seed on every platform
// with libstdc++, unlike distributions whose algorithm is unspecified.
double sampler::uniform() { return std::generate_canonical<double, 53>(rng_); }

std::int32_t sampler::draw(std::span<const float> probs) {
  if (probs.empty()) throw std::invalid_argument("sampler::draw: empty distribution");
  return std::int32_t(kc::sample_categorical(probs.data(), std::int64_t(probs.size()), uniform()));
}

}  // namespace specpipe
