#pragma once
// Shared helpers of the GPU kernel tests: a fixture that skips without a
// device, device arrays with a poisoned sentinel tail, random inputs with
// outliers, and tolerance checks (atol + rtol * |ref|, NaN never passes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "memory/allocator.hpp"
#include "memory/dtype.hpp"
#include "support/gpu_test.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/device.hpp"
#endif

namespace specpipe::test {

// gpu_test with a device allocator.
class cuda_test : public gpu_test {
 protected:
  void SetUp() override {
    gpu_test::SetUp();
    if (IsSkipped()) return;
    dev_ = make_device_allocator(0);
  }
  std::unique_ptr<allocator> dev_;
};

constexpr std::size_t sentinel = 64;  // elements after every output

// Values in [-1, 1] with a few outliers of magnitude up to `outlier`.
inline std::vector<float> random_values(std::mt19937& rng, std::size_t n, float outlier = 8.f) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  for (std::size_t i = 0; i < n / 97 + 1 && n > 0; ++i) v[rng() % n] = outlier * u(rng);
  return v;
}

inline std::vector<std::uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}
inline std::vector<float> from_bf16(const std::vector<std::uint16_t>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(v[i]);
  return out;
}
// bf16-rounded copy, so references see exactly what the kernel reads.
inline std::vector<float> round_bf16(const std::vector<float>& v) { return from_bf16(to_bf16(v)); }

#ifdef SPECPIPE_HAVE_CUDA
// n elements plus a sentinel tail, all filled with `poison` bytes first.
template <class T>
struct dev_array {
  dev_array(allocator& a, std::size_t n, int poison = 0xff) : n_(n), buf_(a, (n + sentinel) * sizeof(T)) {
    kernels::cuda::fill_bytes(buf_.data(), poison, buf_.size(), nullptr);
    kernels::cuda::device_synchronize();
    poison_ = poison;
  }
  dev_array(allocator& a, const std::vector<T>& host, int poison = 0xff) : dev_array(a, host.size(), poison) {
    upload(host);
  }
  void upload(const std::vector<T>& host) {
    kernels::cuda::copy_to_device(buf_.data(), host.data(), host.size() * sizeof(T), nullptr);
    kernels::cuda::device_synchronize();
  }
  std::vector<T> download() const {
    std::vector<T> out(n_);
    kernels::cuda::device_synchronize();
    kernels::cuda::copy_to_host(out.data(), buf_.data(), n_ * sizeof(T), nullptr);
    kernels::cuda::device_synchronize();
    return out;
  }
  // True when the sentinel tail still holds the poison bytes.
  bool sentinel_intact() const {
    std::vector<unsigned char> tail(sentinel * sizeof(T));
    kernels::cuda::device_synchronize();
    kernels::cuda::copy_to_host(tail.data(), static_cast<const unsigned char*>(buf_.data()) + n_ * sizeof(T),
                                tail.size(), nullptr);
    kernels::cuda::device_synchronize();
    for (auto b : tail)
      if (b != static_cast<unsigned char>(poison_)) return false;
    return true;
  }
  T* get() const { return buf_.as<T>(); }
  std::size_t n_;
  buffer buf_;
  int poison_ = 0xff;
};
#endif

// Checks |got - ref| <= atol + rtol |ref| everywhere (NaN fails); reports the
// first offenders with their index and the seed.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double atol, double rtol,
                         const std::string& what, unsigned seed) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int bad = 0;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - ref[i]);
    const bool ok = std::isfinite(got[i]) && err <= atol + rtol * std::fabs(ref[i]);
    if (!ok && bad++ < 5)
      ADD_FAILURE() << what << " (seed " << seed << "): element " << i << " = " << got[i] << ", expected "
                    << ref[i];
    worst = std::max(worst, std::isfinite(got[i]) ? err : INFINITY);
  }
  EXPECT_EQ(bad, 0) << what << " (seed " << seed << "): " << bad << " of " << got.size()
                    << " elements out of tolerance, worst abs error " << worst;
}

}  // namespace specpipe::test
