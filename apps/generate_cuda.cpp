#include "apps/generate_cuda.hpp"
#include "apps/cli_support.hpp"

#include <cstdio>
#include <iostream>

#include "apps/quantspec_cli.hpp"
#include "model/cuda_decode_backend.hpp"
#include "model/cuda_forward.hpp"
#include "model/cuda_quantspec.hpp"

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

}  // namespace

int run_generate_cuda(const model& m, const generation_request& req, const std::vector<std::int32_t>& eos_ids,
                      std::int64_t max_context, const std::string& prompt_text, const kv_mode& kv,
                      double gpu_memory_gib) {
  cuda_forward_options o;
  o.max_batch = 1;
  o.max_context = max_context;
  o.kv = kv;
  check_budget(gpu_memory_gib, cuda_model::weight_bytes(m.config), cuda_forward::device_bytes(m.config, o));
  const cuda_model gpu(m.config, m.weights, 0);
  cuda_forward fwd(gpu, o);
  cuda_decode_backend backend(fwd, 0, req.sampling);

  std::cout << prompt_text << std::flush;
  const auto res = generate(backend, m.tok, eos_ids, req, max_context,
                            [](std::string_view d) { std::cout << d << std::flush; });
  std::cout << "\n";

  // The first decode step of a batch size runs eagerly and the second is
  // captured as a CUDA graph; the rate counts them as the CPU path does.
  print_timing_line(res, m.dir.filename().string(), "cuda",
                    kv.format == kv_format::full ? std::string("full (bf16)") : kv.describe());
  return 0;
}

int run_generate_cuda_quantspec(const model& m, const generation_request& req,
                                const std::vector<std::int32_t>& eos_ids, std::int64_t max_context,
                                const std::string& prompt_text, std::int64_t kv_group, const draft_options& draft,
                                const gamma_options& gamma, double gpu_memory_gib) {
  if (draft.quantize_lm_head)
    throw usage_error("--draft-lm-head: the GPU draft shares lm_head with the target (use --device cpu)");
  const int most = gamma.adaptive ? std::min(gamma.max_gamma, 15) : gamma.gamma;
  cuda_forward_options o;
  o.max_batch = 1;
  o.max_context = max_context;
  o.kv = parse_kv_mode("hier", 8, kv_group, 0);
  o.kv_max_append = std::max<std::int64_t>(16, most + 1);
  o.max_step_tokens = most + 1;
  check_budget(gpu_memory_gib, cuda_model::weight_bytes(m.config) + draft_bytes(m.config, draft),
               cuda_forward::device_bytes(m.config, o));
  cuda_model gpu(m.config, m.weights, 0);
  gpu.make_draft(draft.group);
  cuda_forward fwd(gpu, o);
  gamma_options g = gamma;
  g.max_gamma = std::min(g.max_gamma, 15);
  cuda_quantspec qs(fwd, req.sampling, g);
  cuda_quantspec_backend backend(qs, fwd, 0);

  std::cout << prompt_text << std::flush;
  const auto res = generate(backend, m.tok, eos_ids, req, max_context,
                            [](std::string_view d) { std::cout << d << std::flush; });
  std::cout << "\n";
  print_timing_line(res, m.dir.filename().string(), "cuda",
                    "quantspec G=" + std::to_string(kv_group) + " gamma " +
                        (gamma.adaptive ? std::string("auto") : std::to_string(gamma.gamma)) +
                        " (draft: 4-bit weights + INT4 KV, target: INT8 KV)");
  print_spec_line(qs.stats());
  std::fprintf(stderr, "[%s; on the GPU %.2f MiB]\n", describe_draft_memory(m.config, draft).c_str(),
               double(gpu.draft_bytes()) / (1024.0 * 1024.0));
  return 0;
}

}  // namespace specpipe::apps
