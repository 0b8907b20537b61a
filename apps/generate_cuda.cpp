#include "apps/generate_cuda.hpp"

#include <cstdio>
#include <string>

#include "actors/cuda_quantspec_step_compute.hpp"
#include "actors/cuda_specache_step_compute.hpp"
#include "actors/cuda_step_compute.hpp"
#include "apps/cli_support.hpp"
#include "model/cuda_forward.hpp"

namespace specpipe::apps {

namespace {

constexpr double gib = 1024.0 * 1024.0 * 1024.0;

// --gpu-memory: what the run would allocate on the device, checked before
// anything is.
void check_budget(double budget_gib, std::size_t weights, std::size_t forward) {
  if (budget_gib <= 0) return;
  const double need = double(weights + forward) / gib;
  if (need > budget_gib) {
    char b[256];
    std::snprintf(b, sizeof b,
                  "--gpu-memory: this run needs %.2f GiB on the GPU (weights %.2f, caches and scratch %.2f), more "
                  "than the %.2f GiB given",
                  need, double(weights) / gib, double(forward) / gib, budget_gib);
    throw usage_error(b);
  }
}

cuda_specache_step_options specache_options(std::int64_t max_context, const kv_mode& kv, bool timeline) {
  cuda_specache_step_options o;
  o.max_context = max_context;
  o.max_sequences = 1;
  o.kv = kv;
  o.timeline = timeline;
  return o;
}

std::string fixed_pct(double share) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * share);
  return b;
}

}  // namespace

std::shared_ptr<step_compute> make_generate_cuda_compute(const model& m, std::int64_t max_context, const kv_mode& kv,
                                                         double gpu_memory_gib, bool timeline) {
  const std::size_t weights = cuda_model::weight_bytes(m.config);
  if (kv.speculative()) {
    const auto o = specache_options(max_context, kv, timeline);
    check_budget(gpu_memory_gib, weights, cuda_specache_step_device_bytes(m.config, o) - weights);
    return make_cuda_specache_step_compute(m.config, m.weights, o);
  }
  cuda_step_options o;
  o.max_context = max_context;
  o.max_sequences = 1;
  o.kv = kv;
  check_budget(gpu_memory_gib, weights, cuda_step_device_bytes(m.config, o) - weights);
  return make_cuda_step_compute(m.config, m.weights, o);
}

std::shared_ptr<step_compute> make_generate_cuda_quantspec_compute(const model& m,
                                                                   const quantspec_step_options& opts,
                                                                   double gpu_memory_gib) {
  cuda_quantspec_step_options o;
  o.max_context = opts.max_context;
  o.max_sequences = 1;
  o.kv_group = opts.kv_group;
  o.draft = opts.draft;
  o.gamma = opts.gamma;
  std::size_t all = 0;
  try {
    all = cuda_quantspec_step_device_bytes(m.config, o);
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
  const std::size_t weights = cuda_model::weight_bytes(m.config) + draft_bytes(m.config, o.draft);
  check_budget(gpu_memory_gib, weights, all - weights);
  return make_cuda_quantspec_step_compute(m.config, m.weights, o);
}

void print_gpu_specache_line(const model& m, std::int64_t max_context, const kv_mode& kv, const specache_stats& s) {
  const std::size_t host = cuda_specache_step_host_bytes(m.config, specache_options(max_context, kv, false));
  std::fprintf(stderr,
               "[specache (GPU, %s prefetch, top-k %d): %lld steps | top-k hit rate %s | speculative token matched "
               "%.1f%% | %.1f KiB fetched per step | host store %.1f MiB]\n",
               kv.prefetch == specache_prefetch::output ? "output" : "speculative", kv.topk,
               static_cast<long long>(s.steps),
               s.needed > 0 ? (fixed_pct(s.hit_rate()) + " (" + std::to_string(s.hits) + " of " +
                               std::to_string(s.needed) + " rows, against this step's own attention)")
                                  .c_str()
                            : "n/a",
               100 * s.guess_rate(), s.steps > 0 ? double(s.bytes_fetched) / double(s.steps) / 1024.0 : 0.0,
               double(host) / double(1 << 20));
}

}  // namespace specpipe::apps
