#include "actors/actor_overhead.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "actors/actor_runtime.hpp"
#include "actors/cpu_step_compute.hpp"
#include "actors/pipeline.hpp"
#include "model/forward.hpp"

namespace specpipe {
namespace {

std::int32_t argmax(const std::vector<float>& v) {
  return std::int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

actor_overhead_result measure_actor_overhead(const model_config& config, const model_weights& weights,
                                             const std::vector<std::int32_t>& prompt, std::int32_t decode_tokens,
                                             int threads) {
  using clock = std::chrono::steady_clock;
  const std::int64_t max_context = std::int64_t(prompt.size()) + decode_tokens + 1;
  actor_overhead_result r;
  // Bare: prefill, then one forward per token, greedy.
  std::vector<std::int32_t> bare_tokens;
  {
    cpu_forward fwd(config, weights, threads);
    auto cache = make_full_cache(config, max_context, &fwd.pool());
    std::vector<float> logits(std::size_t(config.vocab_size));
    fwd.forward(prompt, *cache, logits);
    double total = 0;
    for (std::int32_t i = 0; i < decode_tokens; ++i) {
      const std::int32_t one[1] = {argmax(logits)};
      bare_tokens.push_back(one[0]);
      if (i + 1 == decode_tokens) break;
      const auto t0 = clock::now();
      fwd.forward(one, *cache, logits);
      total += std::chrono::duration<double, std::micro>(clock::now() - t0).count();
      ++r.decode_steps;
    }
    r.bare_step_us = r.decode_steps > 0 ? total / double(r.decode_steps) : 0;
  }
  // Through the actors, with the same greedy choice.
  actor_runtime rt;
  pipeline_options o;
  o.max_context = max_context;
  o.max_sequences_per_worker = 1;
  o.detokenize = [](std::span<const std::int32_t>) { return std::string(); };
  o.make_picker = [](const sampling_params&) {
    return [](std::span<const float> l) { return std::int32_t(std::max_element(l.begin(), l.end()) - l.begin()); };
  };
  pipeline p(rt.system(), {make_cpu_step_compute(config, weights, {max_context, threads})}, o);
  generation_request req;
  req.prompt = prompt;
  req.max_tokens = decode_tokens;
  req.ignore_eos = true;
  req.sampling.temperature = 0;
  const auto res = p.generate(1, req);
  const auto st = p.stats();
  r.same_tokens = res.tokens == bare_tokens;
  r.actor_step_us = res.decode_forwards > 0 ? res.decode_seconds * 1e6 / double(res.decode_forwards) : 0;
  r.overhead_pct = r.bare_step_us > 0 ? 100.0 * (r.actor_step_us - r.bare_step_us) / r.bare_step_us : 0;
  r.message_share_pct = st.decode_roundtrip_us > 0
                            ? 100.0 * (st.decode_roundtrip_us - st.decode_compute_us) / st.decode_roundtrip_us
                            : 0;
  return r;
}

void print_actor_overhead(std::ostream& os, const actor_overhead_result& r) {
  char line[320];
  std::snprintf(line, sizeof line,
                "actor overhead (CPU backend, %lld decode steps): bare forward %.1f us/step, through the actors "
                "%.1f us/step: %+.1f%% | messages %.1f%% of the scheduler's step round trip | tokens %s\n",
                static_cast<long long>(r.decode_steps), r.bare_step_us, r.actor_step_us, r.overhead_pct,
                r.message_share_pct, r.same_tokens ? "identical" : "DIFFER");
  os << line;
}

}  // namespace specpipe
