#include "actors/actor_overhead.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

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
                                             int threads, int rounds) {
  using clock = std::chrono::steady_clock;
  const std::int64_t max_context = std::int64_t(prompt.size()) + decode_tokens + 1;
  actor_overhead_result r;
  r.rounds = std::max(1, rounds);
  cpu_forward fwd(config, weights, threads);
  std::vector<float> logits(std::size_t(config.vocab_size));
  // Bare: prefill, then one forward per token, greedy. Returns the mean
  // forward time of a decode token.
  std::vector<std::int32_t> bare_tokens;
  auto bare_round = [&] {
    bare_tokens.clear();
    auto cache = make_full_cache(config, max_context, &fwd.pool());
    fwd.forward(prompt, *cache, logits);
    double total = 0;
    std::int64_t steps = 0;
    for (std::int32_t i = 0; i < decode_tokens; ++i) {
      const std::int32_t one[1] = {argmax(logits)};
      bare_tokens.push_back(one[0]);
      if (i + 1 == decode_tokens) break;
      const auto t0 = clock::now();
      fwd.forward(one, *cache, logits);
      total += std::chrono::duration<double, std::micro>(clock::now() - t0).count();
      ++steps;
    }
    r.decode_steps = steps;
    return steps > 0 ? total / double(steps) : 0.0;
  };
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
  // Rounds alternate between the two paths and each keeps its fastest
  // round: on a shared machine the minimum is the cost without
  // interference, and alternating exposes both to the same load.
  r.bare_step_us = r.actor_step_us = std::numeric_limits<double>::infinity();
  r.same_tokens = true;
  scheduler_stats before = p.stats();
  for (int round = 0; round < r.rounds; ++round) {
    r.bare_step_us = std::min(r.bare_step_us, bare_round());
    const auto res = p.generate(std::uint64_t(round + 1), req);
    const auto after = p.stats();
    r.same_tokens = r.same_tokens && res.tokens == bare_tokens;
    const double step_us = res.decode_forwards > 0 ? res.decode_seconds * 1e6 / double(res.decode_forwards) : 0;
    if (res.decode_forwards > 0 && step_us < r.actor_step_us) {
      r.actor_step_us = step_us;
      const auto steps = after.decode_steps - before.decode_steps;
      r.worker_step_us = steps > 0 ? (after.decode_compute_us - before.decode_compute_us) / double(steps) : 0;
    }
    before = after;
  }
  if (!std::isfinite(r.actor_step_us)) r.actor_step_us = 0;
  r.overhead_pct = r.bare_step_us > 0 ? 100.0 * (r.actor_step_us - r.bare_step_us) / r.bare_step_us : 0;
  // The share of the best actor step not spent in the worker's forward:
  // messages, scheduling, the store append. (The round trip is no measure
  // once a step is queued behind the running one: it includes that wait.)
  r.message_share_pct =
      r.actor_step_us > 0 ? 100.0 * (r.actor_step_us - r.worker_step_us) / r.actor_step_us : 0;
  return r;
}

void print_actor_overhead(std::ostream& os, const actor_overhead_result& r) {
  char line[400];
  std::snprintf(line, sizeof line,
                "actor overhead (CPU backend, %lld decode steps, best of %d rounds): "
                "bare step %.1f us, actor step %.1f us, "
                "overhead %+.1f%% | forward inside the worker %.1f us, the rest %.1f%% of an actor step | tokens %s\n",
                static_cast<long long>(r.decode_steps), r.rounds, r.bare_step_us, r.actor_step_us, r.overhead_pct,
                r.worker_step_us, r.message_share_pct, r.same_tokens ? "identical" : "DIFFER");
  os << line;
}

}  // namespace specpipe
