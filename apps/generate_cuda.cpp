#include "apps/generate_cuda.hpp"
#include "apps/cli_support.hpp"

#include <cstdio>
#include <iostream>

#include "model/cuda_decode_backend.hpp"
#include "model/cuda_forward.hpp"

namespace specpipe::apps {

int run_generate_cuda(const model& m, const generation_request& req, const std::vector<std::int32_t>& eos_ids,
                      std::int64_t max_context, const std::string& prompt_text, const kv_mode& kv) {
  const cuda_model gpu(m.config, m.weights, 0);
  cuda_forward_options o;
  o.max_batch = 1;
  o.max_context = max_context;
  o.kv = kv;
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

}  // namespace specpipe::apps
