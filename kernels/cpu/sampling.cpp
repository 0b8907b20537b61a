#include "kernels/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace specpipe::kernels::cpu {

std::int64_t argmax(const float* x, std::int64_t n) {
  std::int64_t best = -1;
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    if (best < 0 || x[i] > x[best]) best = i;
  }
  return best;
}

void softmax(const float* logits, std::int64_t n, float temperature, float* probs) {
  if (n <= 0) return;
  float max_logit = -std::numeric_limits<float>::infinity();
  for (std::int64_t i = 0; i < n; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    // (x - max) / T rather than x/T - max/T: the max maps to exactly exp(0) = 1,
    // so sum >= 1; dividing (not multiplying by 1/T) keeps a tiny T from
    // turning 0 * inf into NaN.
    const float p = (logits[i] == -std::numeric_limits<float>::infinity())
                        ? 0.0f
                        : std::exp((logits[i] - max_logit) / temperature);
    probs[i] = p;
    sum += p;
  }
  const double inv_sum = 1.0 / sum;
  for (std::int64_t i = 0; i < n; ++i) probs[i] = float(double(probs[i]) * inv_sum);
}

std::int64_t top_k_filter(float* logits, std::int64_t n, std::int64_t k, float* scratch) {
  if (k <= 0 || k >= n) return n;
  std::copy(logits, logits + n, scratch);
  // k-th largest: nth_element with descending order puts it at index k-1.
  std::nth_element(scratch, scratch + (k - 1), scratch + n, std::greater<float>());
  const float threshold = scratch[k - 1];
  std::int64_t kept = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (logits[i] < threshold)
      logits[i] = -std::numeric_limits<float>::infinity();
    else
      ++kept;
  }
  return kept;
}

std::int64_t top_p_filter(float* probs, std::int64_t n, float top_p, std::int32_t* order) {
  if (n <= 0) return 0;
  if (top_p >= 1.0f) return n;
  std::iota(order, order + n, 0);
  // Only tokens with mass need ordering (after top-k most have none); ties go
  // to the lower index so the result does not depend on the sort's internals.
  std::int32_t* with_mass_end =
      std::partition(order, order + n, [&](std::int32_t i) { return probs[i] > 0.0f; });
  std::sort(order, with_mass_end, [&](std::int32_t a, std::int32_t b) {
    return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
  });
  double mass_before = 0.0;
  std::int64_t kept = 0;
  while (kept < n && (kept == 0 || mass_before < double(top_p))) {
    mass_before += probs[order[kept]];
    ++kept;
  }
  for (std::int64_t r = kept; r < n; ++r) probs[order[r]] = 0.0f;
  if (!(mass_before > 0.0)) return kept;
  const double inv = 1.0 / mass_before;
  for (std::int64_t r = 0; r < kept; ++r) probs[order[r]] = float(probs[order[r]] * inv);
  return kept;
}

std::int64_t sample_categorical(const float* probs, std::int64_t n, double u) {
  double total = 0.0;
  for (std::int64_t i = 0; i < n; ++i) total += probs[i];
  const double target = u * total;
  double cum = 0.0;
  std::int64_t last_positive = -1;
  for (std::int64_t i = 0; i < n; ++i) {
    if (probs[i] <= 0.0f) continue;
    cum += probs[i];
    last_positive = i;
    if (cum > target) return i;
  }
  // Rounding can leave cum a hair below target when u is close to 1.
  return last_positive;
}

}  // namespace specpipe::kernels::cpu
