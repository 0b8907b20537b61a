// `specpipe bench --kv quantspec` on the CPU backend: for each context, the
// cache is filled by a target prefill of random tokens, then, from the same
// state, plain autoregressive decoding by the target (16-bit weights, INT8
// KV) and QuantSpec rounds (4-bit draft over INT4 KV, verify over INT8)
// decode --tokens tokens each. Reported: the target step, the draft step,
// the verify of gamma + 1 positions, QuantSpec's tokens/s and its ratio to
// the autoregressive rate measured in the same run, the measured acceptance
// and the cost ratio c = draft step / target step. On random weights the
// acceptance means nothing; --acceptance A adds the speedup the measured step
// costs give at a rate A (Leviathan et al., sec. 3.4).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "apps/bench.hpp"
#include "apps/cli_support.hpp"
#include "apps/quantspec_cli.hpp"
#include "model/draft_weights.hpp"
#include "model/forward.hpp"
#include "model/hier_cache.hpp"
#include "model/quantspec.hpp"

namespace specpipe::apps {
namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double spread_of(const std::vector<double>& v) {
  if (v.empty()) return 0;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *hi - *lo;
}

}  // namespace

bench_report run_quantspec_bench(const bench_options& o, const quantspec_bench_options& q) {
  bench_report r;
  r.device_name = "CPU backend";
  const model_config& c = o.config;
  const std::int64_t G = quantspec_group_of(q.group);
  quantspec_flags qf{q.weight_group, q.quantize_lm_head};
  const draft_options dopts = draft_options_of(qf);
  gamma_options gopts = gamma_of(q.gamma, G);
  if (q.tokens < 2) throw usage_error("--tokens: must be >= 2, got " + std::to_string(q.tokens));

  cpu_bench_model bm;
  load_cpu_bench_model(o, bm);
  cpu_forward fwd(c, bm.weights);
  const draft_weights draft(c, bm.weights, dopts, &fwd.pool());
  r.notes.push_back(describe_draft_memory(c, dopts));
  r.notes.push_back("quantspec: G=" + std::to_string(G) + ", gamma " + q.gamma +
                    ", greedy verification; ar = the target alone over the same INT8 cache; cost ratio c = draft "
                    "step / ar step");
  if (o.model_dir.empty())
    r.notes.push_back("random weights: the measured acceptance says nothing about a trained model (use --model, "
                      "or --acceptance A for the speedup at a rate A)");

  sampling_params greedy;
  greedy.temperature = 0;
  std::mt19937 rng(3);
  std::vector<float> logits(std::size_t(c.vocab_size));
  for (const long long ctx : o.contexts) {
    for (const long long b : o.batches)
      if (b != 1) r.points.push_back({"quantspec", b, ctx, true, "the CPU benchmark decodes batch 1 only"});
    // Room for the warm-up rounds, the timed tokens and the last round's overshoot.
    const std::int64_t max_len = ctx + q.tokens + std::int64_t(o.warmup + 2) * (gopts.max_gamma + 1);
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(ctx));
    for (auto& t : prompt) t = std::int32_t(rng() % std::uint32_t(c.vocab_size));
    hier_cache base(c, max_len, {G, hier_read::int8}, &fwd.pool());
    std::int32_t first = 0;
    {
      quantspec_decoder pre(fwd, draft.set(), base, base, greedy, gopts);
      first = pre.prefill(prompt);
    }

    // The target alone, one token per forward.
    std::vector<double> ar_ms;
    {
      hier_cache cache = base;
      std::int32_t t = first;
      for (long long i = 0; i < o.warmup + q.tokens; ++i) {
        const auto t0 = clock_type::now();
        fwd.forward(std::span<const std::int32_t>(&t, 1), cache, logits);
        if (i >= o.warmup) ar_ms.push_back(ms_since(t0));
        t = std::int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
      }
    }
    const double ar = median_of(ar_ms);
    r.points.push_back({"ar", 1, ctx, false, "target: 16-bit weights, INT8 KV", ar, spread_of(ar_ms), 1e3 / ar});

    // QuantSpec from the same state.
    hier_cache cache = base;
    quantspec_decoder dec(fwd, draft.set(), cache, cache, greedy, gopts);
    std::int32_t pending = first;
    for (long long i = 0; i < o.warmup; ++i) pending = dec.round(pending, max_len).tokens.back();
    const spec_decode_stats warm = dec.stats();
    std::vector<double> draft_ms, verify_ms;
    std::int64_t done = 0;
    const auto t0 = clock_type::now();
    while (done < q.tokens) {
      const quantspec_round rd = dec.round(pending, max_len);
      done += std::int64_t(rd.tokens.size());
      pending = rd.tokens.back();
      if (rd.drafted > 0) draft_ms.push_back(1e3 * rd.draft_seconds() / rd.drafted);
      verify_ms.push_back(1e3 * rd.verify_seconds());
    }
    const double total_ms = ms_since(t0);
    spec_decode_stats st = dec.stats();
    st.drafts -= warm.drafts;
    st.draft_tokens -= warm.draft_tokens;
    st.accepted_tokens -= warm.accepted_tokens;
    st.rejections -= warm.rejections;
    for (std::size_t i = 0; i < warm.accepted_per_position.size(); ++i)
      st.accepted_per_position[i] -= warm.accepted_per_position[i];
    const double alpha = st.acceptance_rate(), mean_len = st.mean_acceptance_length();
    const double d = median_of(draft_ms), v = median_of(verify_ms);
    const double cost = ar > 0 ? d / ar : 0;
    const double tps = 1e3 * double(done) / total_ms, ar_tps = 1e3 / ar;
    const int gamma = int(std::lround(st.drafts > 0 ? double(st.draft_tokens) / double(st.drafts) : 0));
    r.points.push_back({"draft", 1, ctx, false, "4-bit weights, INT4 KV; c = " + fixed(cost, 2), d,
                        spread_of(draft_ms), d > 0 ? 1e3 / d : 0, 0, 0, 0, {{"cost_ratio", cost}}});
    r.points.push_back({"verify", 1, ctx, false,
                        std::to_string(gamma + 1) + " positions; " + fixed(v / ar, 2) + "x the ar step", v,
                        spread_of(verify_ms), 0, 0, 0, 0, {{"verify_over_ar_step", v / ar}}});
    bench_point qp{"quantspec", 1, ctx, false,
                   "acceptance " + fixed(100 * alpha, 1) + "%, mean length " + fixed(mean_len, 2) + ", " +
                       fixed(tps / ar_tps, 2) + "x ar",
                   total_ms / double(done), 0, tps};
    qp.extra = {{"acceptance_rate", alpha},
                {"per_token_acceptance", st.per_token_acceptance()},
                {"mean_acceptance_length", mean_len},
                {"speedup_vs_ar", tps / ar_tps},
                {"gamma_mean", double(gamma)},
                {"draft_ms", d},
                {"verify_ms", v}};
    for (std::size_t i = 0; i < st.accepted_per_position.size(); ++i)
      qp.extra.emplace_back("kept_at_position_" + std::to_string(i),
                            st.drafts > 0 ? double(st.accepted_per_position[i]) / double(st.drafts) : 0.0);
    if (q.assume_acceptance > 0 && gamma > 0) {
      // Tokens a round yields at rate A, over the round's measured time in ar steps.
      double expected = 0, term = 1;
      for (int i = 0; i <= gamma; ++i, term *= q.assume_acceptance) expected += term;
      const double at_a = expected * ar / (gamma * d + v);
      qp.extra.emplace_back("speedup_at_assumed_acceptance", at_a);
      r.notes.push_back("context " + std::to_string(ctx) + ": at acceptance " + fixed(100 * q.assume_acceptance, 0) +
                        "% the measured costs give " + fixed(at_a, 2) + "x ar (gamma " + std::to_string(gamma) +
                        ", " + fixed(expected, 2) + " tokens per round)");
    }
    r.points.push_back(qp);
  }
  return r;
}

}  // namespace specpipe::apps
