// The GPU's tiled repack (kernels/cuda/int4_tiled.hpp) against
// kernels::cpu::tile_int4 byte for byte, on shapes the GEMV never sees (odd
// in, in not a multiple of 8, small groups) and sources whose row padding
// holds garbage and whose code_stride is wider than the format's: every
// output byte written (poisoned first), nothing past the outputs. The
// shapes the GEMV runs are checked in cuda_int4_gemv_test.cpp. Bad arguments
// are refused before any device work.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/int4_linear.hpp"
#include "kernels/int4_tiled.hpp"
#include "tests/kernels/cuda_test_util.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/int4_tiled.hpp"
#endif

namespace specpipe::test {
namespace {

class cuda_int4_tiled : public cuda_test {};

#ifdef SPECPIPE_HAVE_CUDA
namespace kc = kernels::cuda;
namespace kcpu = kernels::cpu;

// The first differing element, not the whole arrays, on failure.
template <class T>
void expect_same(const std::vector<T>& got, const std::vector<T>& want, const char* name) {
  ASSERT_EQ(got.size(), want.size()) << name;
  const auto [g, w] = std::mismatch(got.begin(), got.end(), want.begin());
  if (g != got.end())
    ADD_FAILURE() << name << " differs first at element " << (g - got.begin()) << " of " << got.size() << ": 0x"
                  << std::hex << unsigned(*g) << ", expected 0x" << unsigned(*w);
}

void run_case(allocator& dev, std::int64_t out, std::int64_t in, std::int64_t group, std::int64_t extra_stride,
              unsigned seed) {
  const std::string what = "out=" + std::to_string(out) + " in=" + std::to_string(in) + " group=" +
                           std::to_string(group) + " extra_stride=" + std::to_string(extra_stride) + " seed " +
                           std::to_string(seed);
  SCOPED_TRACE(what);
  std::mt19937 rng(seed);
  const auto w = random_values(rng, std::size_t(out * in));
  const kcpu::int4_weights q = kcpu::quantize_int4(w.data(), dtype::f32, out, in, 0, group);
  const kcpu::int4_tiled_weights want = kcpu::tile_int4(q.view());
  // The source with a wider stride and garbage after each row's codes (and
  // in an odd last column's high nibble), which the repack must not copy.
  const std::int64_t stride = q.code_stride + extra_stride;
  std::vector<std::uint8_t> src(std::size_t(out * stride), 0xa5);
  for (std::int64_t r = 0; r < out; ++r)
    for (std::int64_t b = 0; b < (in + 1) / 2; ++b) {
      const std::uint8_t garbage = in % 2 && b == in / 2 ? 0xf0 : 0;
      src[std::size_t(r * stride + b)] = q.codes[std::size_t(r * q.code_stride + b)] | garbage;
    }
  dev_array<std::uint8_t> dsrc(dev, src);
  dev_array<std::uint16_t> dscale(dev, q.scale), dzero(dev, q.zero);
  dev_array<std::uint8_t> dcodes(dev, want.codes.size());
  dev_array<std::uint16_t> dsz(dev, want.scale_zero.size());
  kc::int4_tile_args a;
  a.codes = dsrc.get();
  a.code_stride = stride;
  a.scale = dscale.get();
  a.zero = dzero.get();
  a.out = out;
  a.in = in;
  a.group = group;
  a.tiled_codes = dcodes.get();
  a.tiled_scale_zero = dsz.get();
  kc::int4_tile(a, nullptr);
  expect_same(dcodes.download(), want.codes, "codes");
  expect_same(dsz.download(), want.scale_zero, "scale_zero");
  EXPECT_TRUE(dcodes.sentinel_intact()) << "codes written past the end";
  EXPECT_TRUE(dsz.sentinel_intact()) << "scale_zero written past the end";
}

TEST_F(cuda_int4_tiled, matches_the_cpu_repack) {
  run_case(*dev_, 1, 32, 32, 0, 1);
  run_case(*dev_, 5, 77, 8, 0, 2);
  run_case(*dev_, 3, 13, 2, 16, 3);
  run_case(*dev_, 33, 200, 64, 0, 4);
  run_case(*dev_, 17, 4096, 128, 48, 5);
  run_case(*dev_, 100, 1000, 100, 4, 6);
}

TEST_F(cuda_int4_tiled, bad_arguments_are_refused) {
  alignas(16) std::uint8_t dummy[256] = {};
  const auto* h = reinterpret_cast<const std::uint16_t*>(dummy);
  auto good = [&] {
    kc::int4_tile_args a;
    a.codes = dummy;
    a.code_stride = 16;
    a.scale = a.zero = h;
    a.out = 2;
    a.in = 32;
    a.group = 32;
    a.tiled_codes = dummy;
    a.tiled_scale_zero = reinterpret_cast<std::uint16_t*>(dummy);
    return a;
  };
  auto a = good();
  a.codes = nullptr;
  EXPECT_THROW(kc::int4_tile(a, nullptr), std::invalid_argument);
  a = good();
  a.tiled_scale_zero = nullptr;
  EXPECT_THROW(kc::int4_tile(a, nullptr), std::invalid_argument);
  a = good();
  a.group = 3;
  EXPECT_THROW(kc::int4_tile(a, nullptr), std::invalid_argument);
  a = good();
  a.code_stride = 15;  // short of a row
  EXPECT_THROW(kc::int4_tile(a, nullptr), std::invalid_argument);
  a = good();
  a.code_stride = 18;  // not a multiple of 4
  EXPECT_THROW(kc::int4_tile(a, nullptr), std::invalid_argument);
  a = good();
  a.tiled_codes = dummy + 4;
  EXPECT_THROW(kc::int4_tile(a, nullptr), std::invalid_argument);
  a = good();
  a.tiled_scale_zero = reinterpret_cast<std::uint16_t*>(dummy + 2);
  EXPECT_THROW(kc::int4_tile(a, nullptr), std::invalid_argument);
  a = good();
  a.out = 0;
  EXPECT_THROW(kc::int4_tile(a, nullptr), std::invalid_argument);
}
#else
TEST_F(cuda_int4_tiled, skipped_without_cuda) {}
#endif

}  // namespace
}  // namespace specpipe::test
