// Manual benchmark, not run by default (no timed asserts in tests):
//   specpipe_kernels_tests --gtest_also_run_disabled_tests --gtest_filter='*throughput*'
// Reports GEMV throughput in GB/s of weight bytes read, for the roofline notes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "kernels/cpu/thread_pool.hpp"
#include "kernels/linear.hpp"
#include "support/test_util.hpp"

namespace specpipe::kernels::cpu {
namespace {

double gemv_gb_per_s(dtype type, std::int64_t rows, std::int64_t cols, int threads, std::int64_t n) {
  std::mt19937_64 rng(test::default_seed);
  const auto wf = test::random_floats(rng, std::size_t(rows * cols));
  const auto codes = test::to_half_codes(wf, type == dtype::f32 ? dtype::bf16 : type);
  const auto x = test::random_floats(rng, std::size_t(n * cols));
  std::vector<float> y(std::size_t(n * rows));
  thread_pool pool(threads);
  linear_args a;
  a.x = x.data();
  a.w = type == dtype::f32 ? static_cast<const void*>(wf.data()) : codes.data();
  a.w_type = type;
  a.y = y.data();
  a.n = n;
  a.in = cols;
  a.out = rows;
  linear(a, &pool);  // warm-up
  const int reps = 20;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) linear(a, &pool);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  return double(rows * cols) * double(dtype_size(type)) / s / 1e9;
}

TEST(DISABLED_linear_throughput, gemv_4096x4096) {
  for (dtype t : {dtype::bf16, dtype::f16, dtype::f32})
    for (int threads : {1, 2})
      std::printf("gemv %s 4096x4096 n=1 threads=%d: %.2f GB/s of weights\n",
                  std::string(dtype_name(t)).c_str(), threads, gemv_gb_per_s(t, 4096, 4096, threads, 1));
  for (int threads : {1, 2})
    std::printf("gemm bf16 4096x4096 n=32 threads=%d: %.2f GB/s of weights (%.1f GFLOP/s)\n", threads,
                gemv_gb_per_s(dtype::bf16, 4096, 4096, threads, 32),
                gemv_gb_per_s(dtype::bf16, 4096, 4096, threads, 32) * 32.0);
}

}  // namespace
}  // namespace specpipe::kernels::cpu
