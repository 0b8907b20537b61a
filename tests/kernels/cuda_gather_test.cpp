// The GPU gather paths against the CPU reference, reading rows straight from
// mapped pinned host memory: both kernels in every shape the benchmark runs,
// the copy engines, and gather_request (the transfer engine's path) under
// kernel-only and hybrid policies, on driver and huge-page arenas. Random
// indices with duplicates, unsorted order, runs, first and last rows; odd row
// sizes; sentinels around the output. Skips with a reason without a GPU;
// always compiled, so it cannot rot.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "kernels/gather.hpp"
#include "memory/allocator.hpp"
#include "support/gpu_test.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace specpipe::testing {
namespace {

class CudaGather : public test::gpu_test {};

// Random rows with everything the kernels must survive: first and last rows,
// a duplicate, an ascending run longer than a warp's tile, a descending
// stretch.
[[maybe_unused]] std::vector<std::int64_t> hostile_rows(std::mt19937_64& rng, std::int64_t store_rows, std::size_t n) {
  std::uniform_int_distribution<std::int64_t> pick(0, store_rows - 1);
  std::vector<std::int64_t> rows(n);
  for (auto& r : rows) r = pick(rng);
  rows.front() = 0;
  rows.back() = store_rows - 1;
  rows[10] = rows[9];
  const std::int64_t start = std::min<std::int64_t>(rows[19], store_rows - 80);
  for (int i = 20; i < 100; ++i) rows[std::size_t(i)] = start + i - 20;  // a run of 80
  for (int i = 100; i < 120; ++i) rows[std::size_t(i)] = store_rows - 1 - (i - 100);  // descending
  return rows;
}

#ifdef SPECPIPE_HAVE_CUDA
struct gpu_case {
  std::size_t row_bytes;
  std::vector<std::int64_t> rows;
  buffer store;
  void* src_dev = nullptr;
  std::int64_t* d_rows = nullptr;
  unsigned char* d_out = nullptr;  // pad | output | pad
  static constexpr std::size_t pad = 256;

  std::size_t out_bytes() const { return rows.size() * row_bytes; }
  unsigned char* dst() const { return d_out + pad; }

  void poison() { ASSERT_EQ(cudaMemset(d_out, 0xEE, out_bytes() + 2 * pad), cudaSuccess); }

  // Compares the output with the CPU gather and checks the sentinels.
  void expect_matches(const std::string& what) {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    std::vector<unsigned char> got(out_bytes() + 2 * pad), want(out_bytes());
    ASSERT_EQ(cudaMemcpy(got.data(), d_out, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    kernels::cpu::gather_rows(store.data(), row_bytes, rows, want.data());
    EXPECT_EQ(0, std::memcmp(got.data() + pad, want.data(), out_bytes())) << what;
    for (std::size_t i = 0; i < pad; ++i) {
      ASSERT_EQ(got[i], 0xEE) << what << ": wrote before the output";
      ASSERT_EQ(got[got.size() - 1 - i], 0xEE) << what << ": wrote past the output";
    }
  }

  gpu_case(allocator& pinned, std::size_t row_bytes_, std::int64_t store_rows, std::size_t n, std::uint64_t seed)
      : row_bytes(row_bytes_), store(pinned, std::size_t(store_rows) * row_bytes_) {
    std::mt19937_64 rng(seed);
    for (std::size_t i = 0; i < store.size(); ++i) store.as<unsigned char>()[i] = static_cast<unsigned char>(rng());
    rows = hostile_rows(rng, store_rows, n);
    src_dev = pinned_device_pointer(store.data());
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_rows), rows.size() * 8), cudaSuccess);
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_out), out_bytes() + 2 * pad), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(d_rows, rows.data(), rows.size() * 8, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~gpu_case() {
    cudaFree(d_rows);
    cudaFree(d_out);
  }
};

std::vector<kernels::gather_kernel_config> kernel_shapes() {
  using kernels::gather_kernel;
  // Every shape the benchmark times, plus the smallest unroll and one block.
  return {{gather_kernel::flat, 4, 8},       {gather_kernel::warp_rows, 2, 1},  {gather_kernel::warp_rows, 4, 8},
          {gather_kernel::warp_rows, 8, 4},  {gather_kernel::warp_rows, 8, 8},  {gather_kernel::warp_rows, 16, 4},
          {gather_kernel::warp_rows, 2, 1, 1}, {gather_kernel::warp_rows, 2, 1, 2}, {gather_kernel::warp_rows, 4, 2, 8}};
}
#endif

TEST_F(CudaGather, EveryKernelMatchesTheCpuReference) {
#ifdef SPECPIPE_HAVE_CUDA
  auto pinned = make_pinned_allocator();
  // 256: the bench's row; 512: the store's K|V row; 48: 16-byte but not a
  // power of two (division path); 6: the 1-byte fallback.
  for (const std::size_t row_bytes : {std::size_t(256), std::size_t(512), std::size_t(48), std::size_t(6)})
    for (const std::size_t n : {std::size_t(4099), std::size_t(130)}) {
      const std::uint64_t seed = 7 + row_bytes + n;
      gpu_case c(*pinned, row_bytes, 1 << 14, n, seed);
      for (const auto& cfg : kernel_shapes()) {
        const std::string what = std::string(kernels::gather_kernel_name(cfg.kernel)) + " u" +
                                 std::to_string(cfg.unroll) + " b" + std::to_string(cfg.blocks_per_sm) + " w" +
                                 std::to_string(cfg.warps_per_block) + ", seed " +
                                 std::to_string(seed) + ", row_bytes " + std::to_string(row_bytes) + ", n " +
                                 std::to_string(n);
        c.poison();
        ASSERT_EQ(kernels::cuda::gather_rows(c.src_dev, row_bytes, c.d_rows, nullptr, std::int64_t(n), c.dst(),
                                             nullptr, cfg),
                  0)
            << what;
        c.expect_matches(what);
      }
    }
#endif
}

TEST_F(CudaGather, CopyEnginesAndEnginePathMatchTheCpuReference) {
#ifdef SPECPIPE_HAVE_CUDA
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (const auto pages : {pinned_pages::driver, pinned_pages::transparent, pinned_pages::pool}) {
    auto pinned = make_pinned_allocator(pages);
    for (const std::size_t row_bytes : {std::size_t(256), std::size_t(48), std::size_t(6)}) {
      const std::uint64_t seed = 99 + row_bytes;
      gpu_case c(*pinned, row_bytes, 1 << 14, 4099, seed);
      const std::string where = std::string("arena ") + pinned_pages_name(pages) + ", seed " + std::to_string(seed) +
                                ", row_bytes " + std::to_string(row_bytes);
      // Every run by the copy engines.
      kernels::cuda::copy_batch_scratch copies;
      c.poison();
      const auto runs = kernels::coalesce_rows(c.rows);
      ASSERT_EQ(kernels::cuda::copy_runs_batched(c.store.data(), row_bytes, runs, c.dst(), stream, copies), 0) << where;
      c.expect_matches("copy-batch, " + where);
      // The engine's path: kernel only (1 MiB threshold), and split between
      // copy engines and kernel (runs of >= 1 KiB copied, batched or one by one).
      kernels::cuda::gather_scratch scratch;
      scratch.capacity = 2 * c.rows.size();
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&scratch.index_dev), scratch.capacity * 8), cudaSuccess);
      ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&scratch.index_host), scratch.capacity * 8, cudaHostAllocDefault),
                cudaSuccess);
      kernels::gather_policy kernel_only, hybrid, hybrid_each;
      hybrid.min_copy_bytes = hybrid_each.min_copy_bytes = 1024;
      hybrid_each.copy_batch = false;
      const std::pair<const char*, kernels::gather_policy> policies[] = {
          {"engine", kernel_only}, {"engine-hybrid", hybrid}, {"engine-hybrid-each", hybrid_each}};
      for (const auto& [name, policy] : policies) {
        c.poison();
        ASSERT_EQ(kernels::cuda::gather_request(c.store.data(), c.src_dev, row_bytes, c.rows, c.dst(), stream, policy,
                                                scratch),
                  0)
            << name << ", " << where;
        c.expect_matches(std::string(name) + ", " + where);
      }
      // Too little scratch is refused, not overrun.
      scratch.capacity = c.rows.size();
      EXPECT_NE(kernels::cuda::gather_request(c.store.data(), c.src_dev, row_bytes, c.rows, c.dst(), stream,
                                              kernel_only, scratch),
                0);
      cudaFree(scratch.index_dev);
      cudaFreeHost(scratch.index_host);
    }
  }
  cudaStreamDestroy(stream);
#endif
}

}  // namespace
}  // namespace specpipe::testing
