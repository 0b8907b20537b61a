#include "actors/actor_overhead.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include "actors/actor_runtime.hpp"
#include "actors/cpu_step_compute.hpp"
#include "actors/cuda_step_compute.hpp"
#include "actors/pipeline.hpp"
#include "model/cuda_forward.hpp"
#include "model/forward.hpp"

namespace specpipe {
namespace {

std::int32_t argmax(const std::vector<float>& v) {
  return std::int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

namespace {

// One bare round: prefill, then one forward per token, greedy; fills
// `tokens` and returns the mean forward time of a decode token (us).
using bare_round_fn = std::function<double(std::vector<std::int32_t>& tokens, std::int64_t& steps)>;

// The two paths alternate round by round, each keeping its fastest round:
// on a shared machine the minimum is the cost without interference, and
// alternating exposes both to the same load.
actor_overhead_result compare(const bare_round_fn& bare_round, std::shared_ptr<step_compute> compute,
                              const std::vector<std::int32_t>& prompt, std::int32_t decode_tokens,
                              std::int64_t max_context, int rounds, const char* device) {
  actor_overhead_result r;
  r.device = device;
  r.rounds = std::max(1, rounds);
  actor_runtime rt;
  pipeline_options o;
  o.max_context = max_context;
  o.max_sequences_per_worker = 1;
  o.detokenize = [](std::span<const std::int32_t>) { return std::string(); };
  o.make_picker = [](const sampling_params&) {
    return [](std::span<const float> l) { return std::int32_t(std::max_element(l.begin(), l.end()) - l.begin()); };
  };
  pipeline p(rt.system(), {std::move(compute)}, o);
  generation_request req;
  req.prompt = prompt;
  req.max_tokens = decode_tokens;
  req.ignore_eos = true;
  req.sampling.temperature = 0;
  r.bare_step_us = r.actor_step_us = std::numeric_limits<double>::infinity();
  r.same_tokens = true;
  std::vector<std::int32_t> bare_tokens;
  scheduler_stats before = p.stats();
  for (int round = 0; round < r.rounds; ++round) {
    r.bare_step_us = std::min(r.bare_step_us, bare_round(bare_tokens, r.decode_steps));
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

double micros_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

actor_overhead_result measure_actor_overhead(const model_config& config, const model_weights& weights,
                                             const std::vector<std::int32_t>& prompt, std::int32_t decode_tokens,
                                             int threads, int rounds) {
  const std::int64_t max_context = std::int64_t(prompt.size()) + decode_tokens + 1;
  cpu_forward fwd(config, weights, threads);
  std::vector<float> logits(std::size_t(config.vocab_size));
  auto bare_round = [&](std::vector<std::int32_t>& tokens, std::int64_t& steps) {
    tokens.clear();
    auto cache = make_full_cache(config, max_context, &fwd.pool());
    fwd.forward(prompt, *cache, logits);
    double total = 0;
    steps = 0;
    for (std::int32_t i = 0; i < decode_tokens; ++i) {
      const std::int32_t one[1] = {argmax(logits)};
      tokens.push_back(one[0]);
      if (i + 1 == decode_tokens) break;
      const auto t0 = std::chrono::steady_clock::now();
      fwd.forward(one, *cache, logits);
      total += micros_since(t0);
      ++steps;
    }
    return steps > 0 ? total / double(steps) : 0.0;
  };
  return compare(bare_round, make_cpu_step_compute(config, weights, {max_context, threads}), prompt, decode_tokens,
                 max_context, rounds, "CPU");
}

actor_overhead_result measure_actor_overhead_cuda(const model_config& config, const model_weights& weights,
                                                  const std::vector<std::int32_t>& prompt, std::int32_t decode_tokens,
                                                  int rounds) {
  const std::int64_t max_context = std::int64_t(prompt.size()) + decode_tokens + 1;
  const cuda_model gpu(config, weights, 0);
  cuda_forward_options fo;
  fo.max_context = max_context;
  cuda_forward fwd(gpu, fo);
  std::vector<float> logits(std::size_t(config.vocab_size));
  // The same work as the worker's: a batch-1 decode with the logits copied
  // to the host and the argmax taken there.
  auto bare_round = [&](std::vector<std::int32_t>& tokens, std::int64_t& steps) {
    tokens.clear();
    fwd.truncate(0, 0);
    fwd.prefill(0, prompt, logits);
    double total = 0;
    steps = 0;
    const int slot[1] = {0};
    for (std::int32_t i = 0; i < decode_tokens; ++i) {
      const std::int32_t one[1] = {argmax(logits)};
      tokens.push_back(one[0]);
      if (i + 1 == decode_tokens) break;
      const auto t0 = std::chrono::steady_clock::now();
      fwd.decode(slot, one, logits);
      total += micros_since(t0);
      ++steps;
    }
    return steps > 0 ? total / double(steps) : 0.0;
  };
  cuda_step_options co;
  co.max_context = max_context;
  co.max_sequences = 1;
  return compare(bare_round, make_cuda_step_compute(config, weights, co), prompt, decode_tokens, max_context, rounds,
                 "CUDA");
}

void print_actor_overhead(std::ostream& os, const actor_overhead_result& r) {
  char line[400];
  std::snprintf(line, sizeof line,
                "actor overhead (%s backend, %lld decode steps, best of %d rounds): "
                "bare step %.1f us, actor step %.1f us, "
                "overhead %+.1f%% | forward inside the worker %.1f us, the rest %.1f%% of an actor step | tokens %s\n",
                r.device, static_cast<long long>(r.decode_steps), r.rounds, r.bare_step_us, r.actor_step_us, r.overhead_pct,
                r.worker_step_us, r.message_share_pct, r.same_tokens ? "identical" : "DIFFER");
  os << line;
}

}  // namespace specpipe
