// The zero-copy CUDA gather against the CPU reference, reading rows straight
// from mapped pinned host memory. Skips with a reason without a GPU; always
// compiled, so it cannot rot.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kernels/gather.hpp"
#include "memory/allocator.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace specpipe::testing {
namespace {

class CudaGather : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef SPECPIPE_HAVE_CUDA
    GTEST_SKIP() << "built without the CUDA backend (configure with -DSPECPIPE_CUDA=ON)";
#else
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible";
#endif
  }
};

TEST_F(CudaGather, ZeroCopyMatchesTheCpuReference) {
#ifdef SPECPIPE_HAVE_CUDA
  for (const std::size_t row_bytes : {std::size_t(256), std::size_t(48), std::size_t(6)}) {
    const std::uint64_t seed = 7 + row_bytes;
    std::mt19937_64 rng(seed);
    const std::int64_t store_rows = 1 << 14;
    auto pinned = make_pinned_allocator();
    buffer store(*pinned, std::size_t(store_rows) * row_bytes);
    for (std::size_t i = 0; i < store.size(); ++i) store.as<unsigned char>()[i] = static_cast<unsigned char>(rng());
    std::uniform_int_distribution<std::int64_t> pick(0, store_rows - 1);
    std::vector<std::int64_t> rows(4099);
    for (auto& r : rows) r = pick(rng);
    rows.front() = 0;
    rows.back() = store_rows - 1;
    rows[10] = rows[9];  // duplicate
    for (int i = 20; i < 40; ++i) rows[std::size_t(i)] = std::min(store_rows - 1, rows[19] + i - 19);  // a run
    void* src_dev = nullptr;
    ASSERT_EQ(cudaHostGetDevicePointer(&src_dev, store.data(), 0), cudaSuccess);
    std::int64_t* d_rows = nullptr;
    unsigned char* d_dst = nullptr;
    const std::size_t pad = 256, out_bytes = rows.size() * row_bytes;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_rows), rows.size() * 8), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_dst), out_bytes + 2 * pad), cudaSuccess);
    ASSERT_EQ(cudaMemset(d_dst, 0xEE, out_bytes + 2 * pad), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_rows, rows.data(), rows.size() * 8, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(kernels::cuda::gather_rows(src_dev, row_bytes, d_rows, nullptr, std::int64_t(rows.size()), d_dst + pad,
                                         nullptr),
              0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<unsigned char> got(out_bytes + 2 * pad), want(out_bytes);
    ASSERT_EQ(cudaMemcpy(got.data(), d_dst, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    kernels::cpu::gather_rows(store.data(), row_bytes, rows, want.data());
    EXPECT_EQ(0, std::memcmp(got.data() + pad, want.data(), out_bytes)) << "seed " << seed << " row_bytes " << row_bytes;
    for (std::size_t i = 0; i < pad; ++i) {
      ASSERT_EQ(got[i], 0xEE) << "seed " << seed;
      ASSERT_EQ(got[got.size() - 1 - i], 0xEE) << "seed " << seed;
    }
    cudaFree(d_rows);
    cudaFree(d_dst);
  }
#endif
}

}  // namespace
}  // namespace specpipe::testing
