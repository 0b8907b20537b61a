#pragma once
// Shared test helpers: seeded random inputs (with occasional outliers),
// poisoned output buffers with sentinels behind them, dtype round trips, and
// the tolerance check |got - ref| <= atol + rtol * |ref| under which NaN never
// passes.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "memory/dtype.hpp"

namespace specpipe::test {

// The seed every randomized test uses unless it says otherwise; printed on
// failure through seed_trace.
constexpr std::uint64_t default_seed = 20250611;

// SCOPED_TRACE(seed_trace(seed)) puts the seed into every failure message.
std::string seed_trace(std::uint64_t seed);

// n values uniform in [lo, hi); with outlier_rate > 0 that share of them is
// scaled by 8 (the occasional large activation real models have).
std::vector<float> random_floats(std::mt19937_64& rng, std::size_t n, float lo = -1.0f,
                                 float hi = 1.0f, double outlier_rate = 0.0);

// ||got - ref|| / ||ref|| over n values (infinite when `got` holds a NaN or
// an infinity, so a broken kernel never passes a bound).
double rel_error(const float* got, const float* ref, std::size_t n);
inline double rel_error(const std::vector<float>& got, const std::vector<float>& ref) {
  return rel_error(got.data(), ref.data(), ref.size());
}

// The values rounded through a storage dtype and back to f32, and the raw codes.
std::vector<std::uint16_t> to_half_codes(const std::vector<float>& v, dtype t);
std::vector<float> from_half_codes(const std::vector<std::uint16_t>& codes, dtype t);

// A buffer of `n` outputs filled with NaN followed by `guard` sentinel floats;
// check_sentinels fails the test when a kernel wrote past the end.
struct poisoned_output {
  static constexpr float sentinel = -12345.678f;
  poisoned_output(std::size_t n, std::size_t guard = 64);
  float* data() { return storage.data(); }
  std::size_t size() const { return n; }
  ::testing::AssertionResult check_sentinels() const;
  std::size_t n;
  std::vector<float> storage;
};

// Every element within atol + rtol * |ref|. NaN never passes; an infinity
// passes only where ref holds the same infinity. Reports the worst element and
// the count of bad ones.
::testing::AssertionResult all_close(const float* got, const double* ref, std::size_t n,
                                     double atol, double rtol);
::testing::AssertionResult all_close(const float* got, const float* ref, std::size_t n,
                                     double atol, double rtol);

}  // namespace specpipe::test
