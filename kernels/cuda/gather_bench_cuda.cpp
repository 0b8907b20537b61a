// The GPU half of the gather benchmark (CUDA builds only): random rows out of
// a mapped pinned host store, gathered by the zero-copy kernel into device
// memory, timed with CUDA events and checked against the CPU reference.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/gather.hpp"
#include "kernels/gather_bench.hpp"

namespace specpipe::kernels {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("gather bench: ") + what + ": " + cudaGetErrorString(e));
}

}  // namespace

std::vector<gather_bench_result> run_gather_bench_cuda(const gather_bench_options& opts) {
  std::vector<gather_bench_result> out;
  const std::int64_t store_rows = std::int64_t(opts.store_bytes / opts.row_bytes);
  void* host = nullptr;
  check(cudaHostAlloc(&host, std::size_t(store_rows) * opts.row_bytes, cudaHostAllocMapped), "cudaHostAlloc");
  auto* bytes = static_cast<unsigned char*>(host);
  for (std::size_t i = 0; i < std::size_t(store_rows) * opts.row_bytes; i += 4096) bytes[i] = static_cast<unsigned char>(i >> 12);
  void* host_dev = nullptr;
  check(cudaHostGetDevicePointer(&host_dev, host, 0), "cudaHostGetDevicePointer");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  for (const std::int64_t n : opts.row_counts) {
    std::mt19937_64 rng(opts.seed);
    std::uniform_int_distribution<std::int64_t> pick(0, store_rows - 1);
    std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
    for (auto& r : rows) r = pick(rng);
    std::int64_t* d_rows = nullptr;
    void* d_dst = nullptr;
    const std::size_t dst_bytes = std::size_t(n) * opts.row_bytes;
    check(cudaMalloc(reinterpret_cast<void**>(&d_rows), rows.size() * sizeof(std::int64_t)), "cudaMalloc");
    check(cudaMalloc(&d_dst, dst_bytes), "cudaMalloc");
    check(cudaMemcpy(d_rows, rows.data(), rows.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice), "cudaMemcpy");
    std::vector<float> times;
    for (int it = 0; it < std::max(1, opts.iterations) + 1; ++it) {
      check(cudaEventRecord(e0, stream), "cudaEventRecord");
      check(cudaError_t(cuda::gather_rows(host_dev, opts.row_bytes, d_rows, nullptr, n, d_dst, stream)), "gather kernel");
      check(cudaEventRecord(e1, stream), "cudaEventRecord");
      check(cudaEventSynchronize(e1), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
      if (it > 0) times.push_back(ms);  // the first run warms up
    }
    std::nth_element(times.begin(), times.begin() + std::ptrdiff_t(times.size() / 2), times.end());
    const float best_ms = times[times.size() / 2];  // the median
    std::vector<unsigned char> got(dst_bytes), want(dst_bytes);
    check(cudaMemcpy(got.data(), d_dst, dst_bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    cpu::gather_rows(host, opts.row_bytes, rows, want.data());
    gather_bench_result r;
    r.backend = "cuda-zero-copy";
    r.rows = n;
    r.row_bytes = opts.row_bytes;
    r.seconds = double(best_ms) / 1e3;
    r.gb_per_s = double(dst_bytes) / r.seconds / 1e9;
    r.matches_reference = got == want;
    out.push_back(r);
    cudaFree(d_rows);
    cudaFree(d_dst);
  }
  // The roofline for a gather: a dense copy of the same host memory over the
  // same link, measured here (one 256 MiB cudaMemcpyAsync from the pinned store).
  {
    const std::size_t dense = std::min<std::size_t>(std::size_t(256) << 20, std::size_t(store_rows) * opts.row_bytes);
    void* d_dense = nullptr;
    check(cudaMalloc(&d_dense, dense), "cudaMalloc");
    std::vector<float> times;
    for (int it = 0; it < 6; ++it) {
      check(cudaEventRecord(e0, stream), "cudaEventRecord");
      check(cudaMemcpyAsync(d_dense, host, dense, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
      check(cudaEventRecord(e1, stream), "cudaEventRecord");
      check(cudaEventSynchronize(e1), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
      if (it > 0) times.push_back(ms);
    }
    std::nth_element(times.begin(), times.begin() + std::ptrdiff_t(times.size() / 2), times.end());
    gather_bench_result r;
    r.backend = "dense-pinned-copy";
    r.rows = std::int64_t(dense / opts.row_bytes);
    r.row_bytes = opts.row_bytes;
    r.seconds = double(times[times.size() / 2]) / 1e3;
    r.gb_per_s = double(dense) / r.seconds / 1e9;
    r.matches_reference = true;
    r.note = "roofline: one contiguous 256 MiB host-to-device copy";
    out.push_back(r);
    cudaFree(d_dense);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(stream);
  cudaFreeHost(host);
  return out;
}

}  // namespace specpipe::kernels
