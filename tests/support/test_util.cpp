#include "support/test_util.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace specpipe::test {

std::string seed_trace(std::uint64_t seed) { return "random seed " + std::to_string(seed); }

double rel_error(const float* got, const float* ref, std::size_t n) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

std::vector<float> random_floats(std::mt19937_64& rng, std::size_t n, float lo, float hi,
                                 double outlier_rate) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::bernoulli_distribution outlier(outlier_rate);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = dist(rng);
    if (outlier_rate > 0.0 && outlier(rng)) x *= 8.0f;
  }
  return v;
}

std::vector<std::uint16_t> to_half_codes(const std::vector<float>& v, dtype t) {
  std::vector<std::uint16_t> c(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    c[i] = t == dtype::bf16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
  return c;
}

std::vector<float> from_half_codes(const std::vector<std::uint16_t>& codes, dtype t) {
  std::vector<float> v(codes.size());
  for (std::size_t i = 0; i < codes.size(); ++i)
    v[i] = t == dtype::bf16 ? bf16_to_f32(codes[i]) : f16_to_f32(codes[i]);
  return v;
}

poisoned_output::poisoned_output(std::size_t count, std::size_t guard)
    : n(count), storage(count + guard, std::nanf("")) {
  for (std::size_t i = count; i < storage.size(); ++i) storage[i] = sentinel;
}

::testing::AssertionResult poisoned_output::check_sentinels() const {
  for (std::size_t i = n; i < storage.size(); ++i)
    if (!(storage[i] == sentinel))
      return ::testing::AssertionFailure()
             << "sentinel " << (i - n) << " past the end of " << n << " outputs was overwritten ("
             << storage[i] << ")";
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult all_close(const float* got, const double* ref, std::size_t n,
                                     double atol, double rtol) {
  std::size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double g = got[i], r = ref[i];
    double excess;
    if (!std::isfinite(g) || !std::isfinite(r))
      excess = (g == r) ? 0.0 : INFINITY;  // equal infinities pass; NaN never equals
    else
      excess = std::abs(g - r) - (atol + rtol * std::abs(r));
    if (!(excess <= 0.0)) {
      ++bad;
      if (!(excess <= worst_excess)) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(9);
  os << bad << " of " << n << " elements outside atol " << atol << " + rtol " << rtol
     << " * |ref|; worst at " << worst << ": got " << got[worst] << ", expected " << ref[worst];
  return ::testing::AssertionFailure() << os.str();
}

::testing::AssertionResult all_close(const float* got, const float* ref, std::size_t n,
                                     double atol, double rtol) {
  std::vector<double> r(ref, ref + n);
  return all_close(got, r.data(), n, atol, rtol);
}

}  // namespace specpipe::test
