#pragma once
// What the CUDA benchmarks (bench_cuda.cpp, bench_quantspec_cuda.cpp) share:
// CUDA-event timing after warm-up (median and spread of the repeats), the
// device memory in use. CUDA builds only.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/device.hpp"

namespace specpipe::apps::cuda_bench {

inline constexpr double gib = 1024.0 * 1024.0 * 1024.0;

struct timing {
  double median = 0, spread = 0;  // ms
};

// Runs `body` warmup times untimed, then `repeats` times between events on `stream`.
template <class F>
timing time_events(void* stream, int warmup, int repeats, F&& body) {
  kernels::cuda::event_timer t;
  for (int i = 0; i < warmup; ++i) body();
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    t.start(stream);
    body();
    t.stop(stream);
    ms.push_back(t.elapsed_ms());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.back() - ms.front()};
}

// GiB of device memory in use (by anything), for the bench's peak column.
inline double used_gib() {
  const auto m = kernels::cuda::query_memory();
  return double(m.total - m.free) / gib;
}

}  // namespace specpipe::apps::cuda_bench
