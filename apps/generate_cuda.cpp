#include "apps/generate_cuda.hpp"
#include "apps/cli_support.hpp"

#include <functional>
#include <cstdio>
#include <iostream>
#include <optional>

#include "actors/cuda_quantspec_step_compute.hpp"
#include "actors/cuda_step_compute.hpp"
#include "actors/trace_buffer.hpp"
#include "model/cuda_specache_backend.hpp"
#include "model/cuda_forward.hpp"

namespace specpipe::apps {

namespace {

// --gpu-memory: what the run would allocate on the device, checked before
// anything is.
void check_budget(double gib, std::size_t weights, std::size_t forward) {
  if (gib <= 0) return;
  const double need = double(weights + forward) / (1024.0 * 1024.0 * 1024.0);
  if (need > gib) {
    char b[256];
    std::snprintf(b, sizeof b,
                  "--gpu-memory: this run needs %.2f GiB on the GPU (weights %.2f, caches and scratch %.2f), more "
                  "than the %.2f GiB given",
                  need, double(weights) / (1024.0 * 1024.0 * 1024.0), double(forward) / (1024.0 * 1024.0 * 1024.0),
                  gib);
    throw usage_error(b);
  }
}

// The decode loop's calls as spans on the "cuda worker 0" track: the
// prefill, and each generated token ("decode": its step, and the pick that
// waits for the device). QuantSpec rounds add their own draft/verify spans,
// nested in the token span whose pick ran the round.
class traced_backend final : public decode_backend {
 public:
  // `after_step(t0)`: called after each step with its host start time (the
  // GPU spans of SpeCache's timeline); then the token spans are category
  // control, so that only the GPU's own spans count as compute.
  traced_backend(decode_backend& inner, trace_buffer& trace, std::function<void(double)> after_step = {})
      : inner_(inner), trace_(trace), after_step_(std::move(after_step)) {}
  std::int64_t vocab_size() const override { return inner_.vocab_size(); }
  std::int64_t length() const override { return inner_.length(); }
  void prefill(std::span<const std::int32_t> tokens) override {
    const double t0 = trace_now_us();
    inner_.prefill(tokens);
    span("prefill", t0, {{"tokens", double(tokens.size())}});
  }
  void step(std::int32_t token) override {
    step_start_ = trace_now_us();
    inner_.step(token);
    if (after_step_) after_step_(step_start_);
  }
  std::int32_t pick(std::int64_t index) override {
    const double t0 = index == 0 ? trace_now_us() : step_start_;
    const std::int32_t t = inner_.pick(index);
    // "decode" on the compute category: what `specpipe trace summary` counts as steps.
    span(index == 0 ? "first token" : "decode", t0, {{"index", double(index)}, {"length", double(length())}});
    return t;
  }

 private:
  void span(const char* name, double t0, std::vector<std::pair<std::string, double>> args) {
    trace_event e;
    e.track = track;
    e.name = name;
    e.cat = after_step_ ? trace_cat::control : trace_cat::compute;
    e.ts_us = t0;
    e.dur_us = trace_now_us() - t0;
    e.values = std::move(args);
    trace_.add(std::move(e));
  }
  static constexpr const char* track = "cuda worker 0";
  decode_backend& inner_;
  trace_buffer& trace_;
  std::function<void(double)> after_step_;
  double step_start_ = 0;
};

void write_trace(trace_buffer& trace, const std::string& file) {
  trace.write_file(file);
  std::fprintf(stderr, "[trace: %zu events -> %s]\n", trace.size(), file.c_str());
}

}  // namespace

namespace {
std::string fixed_pct(double share) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * share);
  return b;
}
}  // namespace

std::shared_ptr<step_compute> make_generate_cuda_compute(const model& m, std::int64_t max_context, const kv_mode& kv,
                                                         double gpu_memory_gib) {
  cuda_step_options o;
  o.max_context = max_context;
  o.max_sequences = 1;
  o.kv = kv;
  const std::size_t all = cuda_step_device_bytes(m.config, o), weights = cuda_model::weight_bytes(m.config);
  check_budget(gpu_memory_gib, weights, all - weights);
  return make_cuda_step_compute(m.config, m.weights, o);
}

int run_generate_cuda(const model& m, const generation_request& req, const std::vector<std::int32_t>& eos_ids,
                      std::int64_t max_context, const std::string& prompt_text, const kv_mode& kv,
                      double gpu_memory_gib, const std::string& trace_file) {
  if (!kv.speculative()) throw std::logic_error("run_generate_cuda: SpeCache only (the pipeline runs the others)");
  cuda_forward_options o;
  o.max_batch = 1;
  o.max_context = max_context;
  o.kv = kv;
  check_budget(gpu_memory_gib, cuda_model::weight_bytes(m.config), cuda_forward::device_bytes(m.config, o));
  o.specache_fetch = true;  // the host store and the fetch of top-k rows
  o.specache_hit_rate = kv.prefetch == specache_prefetch::speculative;
  o.specache_timeline = !trace_file.empty();  // GPU spans per layer and stream
  const cuda_model gpu(m.config, m.weights, 0);
  cuda_forward fwd(gpu, o);
  cuda_specache_backend spec(fwd, 0, req.sampling, kv.prefetch);
  decode_backend& inner = spec;
  trace_buffer trace;
  std::optional<traced_backend> traced;
  if (!trace_file.empty()) {
    // Each layer on the compute stream, its top-k and fetch on theirs.
    std::function<void(double)> gpu_spans = [&fwd, &trace](double t0) {
      static const char* const tracks[] = {"cuda 0 compute", "cuda 0 planner", "cuda 0 transfer"};
      for (const auto& sp : fwd.specache_timeline()) {
        trace_event e;
        e.track = tracks[sp.stream];
        e.name = sp.name;
        e.cat = sp.stream == 2 ? trace_cat::transfer : trace_cat::compute;
        e.ts_us = t0 + sp.start_ms * 1e3;
        e.dur_us = (sp.end_ms - sp.start_ms) * 1e3;
        e.values = {{"layer", double(sp.layer)}};
        trace.add(std::move(e));
      }
    };
    traced.emplace(inner, trace, std::move(gpu_spans));
  }
  decode_backend& backend = traced ? static_cast<decode_backend&>(*traced) : inner;

  std::cout << prompt_text << std::flush;
  const auto res = generate(backend, m.tok, eos_ids, req, max_context,
                            [](std::string_view d) { std::cout << d << std::flush; });
  std::cout << "\n";

  // The first decode step of a batch size runs eagerly and the second is
  // captured as a CUDA graph; the rate counts them as the CPU path does.
  print_timing_line(res, m.dir.filename().string(), "cuda", kv.describe());
  {
    const auto& s = spec.stats();
    std::fprintf(stderr,
                 "[specache (GPU, %s prefetch, top-k %d): %lld steps | top-k hit rate %s | speculative token matched "
                 "%.1f%% | %.1f KiB fetched per step | host store %.1f MiB]\n",
                 kv.prefetch == specache_prefetch::output ? "output" : "speculative", kv.topk,
                 static_cast<long long>(s.steps),
                 s.needed > 0 ? (fixed_pct(s.hit_rate()) + " (" + std::to_string(s.hits) + " of " +
                                 std::to_string(s.needed) + " rows, against this step's own attention)")
                                    .c_str()
                              : "n/a",
                 100 * s.guess_rate(),
                 s.steps > 0 ? double(s.bytes_fetched) / double(s.steps) / 1024.0 : 0.0,
                 double(fwd.specache_host_bytes()) / double(1 << 20));
  }
  if (!trace_file.empty()) write_trace(trace, trace_file);
  return 0;
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

}  // namespace specpipe::apps
