// `specpipe bench --device cuda --kv quantspec`: for each context and batch,
// in one run on the GPU, with CUDA events after warm-up (median of repeats):
//   ar      plain autoregressive decoding: 16-bit weights over a bf16 cache
//           (the baseline QuantSpec's speedups are quoted against);
//   target  one token of QuantSpec's target: 16-bit weights, INT8 KV reads;
//   draft   one token of the draft: 4-bit weights (quantized on the device),
//           INT4 KV reads; the cost ratio c = draft / target;
//   verify  gamma + 1 tokens per sequence in one forward (INT8 KV, the rows
//           of a sequence sharing each code load);
//   quantspec  measured rounds (greedy) from the same state: tokens/s and
//           acceptance, and the speedup over ar.
// On random weights the measured acceptance means nothing; --acceptance A
// adds the speedup the measured step times give at rate A: a round of
// gamma drafts yields (1 - A^(gamma+1)) / (1 - A) tokens in gamma * draft +
// verify (Leviathan et al., sec. 3.4). Caches are filled with random values
// for the context instead of a prefill, as the decode bench does.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>

#include "apps/bench.hpp"
#include "apps/cli_support.hpp"
#include "apps/quantspec_cli.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "apps/bench_cuda_timing.hpp"
#include "kernels/cuda/device.hpp"
#include "memory/kv_layout.hpp"
#include "model/cuda_forward.hpp"
#include "model/cuda_quantspec.hpp"
#include "model/draft_weights.hpp"
#endif

namespace specpipe::apps {

#ifndef SPECPIPE_HAVE_CUDA

bench_report run_cuda_quantspec_bench(const bench_options&, const quantspec_bench_options&) {
  throw usage_error("--device cuda: this build has no CUDA backend (configure with -DSPECPIPE_CUDA=ON)");
}

#else

namespace kc = kernels::cuda;

namespace {

using namespace cuda_bench;

// Tokens a round of gamma drafts yields at per-token acceptance a.
double expected_tokens(double a, int gamma) {
  double e = 0, term = 1;
  for (int i = 0; i <= gamma; ++i, term *= a) e += term;
  return e;
}

bool fits(std::size_t need) { return need + (std::size_t(1) << 30) <= kc::query_memory().free; }

}  // namespace

bench_report run_cuda_quantspec_bench(const bench_options& o, const quantspec_bench_options& q) {
  bench_report r;
  kc::set_device(0);
  const auto props = kc::query_device(0);
  r.device_name = props.name + " (" + std::to_string(props.sm_count) + " SMs, " +
                  std::to_string(props.total_memory >> 30) + " GiB)";
  r.copy_bandwidth = kc::measure_copy_bandwidth(std::size_t(2) << 30, 20);
  const model_config& c = o.config;
  const std::int64_t G = quantspec_group_of(q.group);
  if (G != 32 && G != 64 && G != 128)
    throw usage_error("--group: the GPU's hierarchical cache uses groups of 32, 64 or 128 tokens, got " +
                      std::to_string(G));
  quantspec_flags qf{q.weight_group, q.quantize_lm_head};
  const draft_options dopts = draft_options_of(qf);
  const gamma_options gopts = gamma_of(q.gamma, G);
  if (gopts.adaptive) throw usage_error("--gamma: the GPU QuantSpec bench times a fixed gamma (auto: use generate)");
  const int gamma = gopts.gamma;
  if (gamma + 1 > 16) throw usage_error("--gamma: at most 15 on the GPU (one verify appends gamma + 1 <= 16 rows)");
  if (q.tokens < 2) throw usage_error("--tokens: must be >= 2, got " + std::to_string(q.tokens));

  std::optional<model> host;
  std::optional<cuda_model> gpu;
  if (!o.model_dir.empty()) {
    host.emplace(model::load(o.model_dir));
    gpu.emplace(host->config, host->weights, 0);
    r.notes.push_back("weights loaded from " + o.model_dir);
  } else {
    gpu.emplace(cuda_model::random(c, 42));
    r.notes.push_back("random weights generated on the GPU (shapes of preset " + o.model_name +
                      "): the measured acceptance says nothing about a trained model (--acceptance A gives the "
                      "speedup at a rate A)");
  }
  gpu->make_draft(dopts.group, kc::int4_gemv_layout(o.draft_gemv ? o.draft_gemv : kc::int4_gemv_default_version),
                  dopts.quantize_lm_head);
  r.notes.push_back(describe_draft_memory(c, dopts) + "; on the GPU " + fixed(double(gpu->draft_bytes()) / gib, 2) +
                    " GiB");
  r.notes.push_back("quantspec on the GPU: hier G=" + std::to_string(G) + ", gamma " + std::to_string(gamma) +
                    ", greedy verification; ar = 16-bit weights over a bf16 cache; target = 16-bit weights over "
                    "INT8 KV; c = draft step / target step");
  const double wbytes = double(cuda_model::weight_bytes(c));
  const double kv_tok = double(cuda_forward::kv_bytes_per_token(c));
  std::mt19937 rng(3);
  auto tokens = [&](std::size_t n) {
    std::vector<std::int32_t> t(n);
    for (auto& x : t) x = std::int32_t(rng() % std::uint32_t(c.vocab_size));
    return t;
  };
  const kv_mode hier = parse_kv_mode("hier", 8, G, 0);

  for (const long long ctx : o.contexts)
    for (const long long b : o.batches) {
      std::vector<int> slots(static_cast<std::size_t>(b));
      for (int i = 0; i < int(b); ++i) slots[std::size_t(i)] = i;
      const std::int64_t steps = o.warmup + o.repeats + 2;
      // 1. Plain autoregressive decoding over a bf16 cache.
      double ar = 0;
      {
        cuda_forward_options fo;
        fo.max_batch = int(b);
        fo.max_context = ctx + steps;
        fo.prefill_chunk = 16;
        fo.prefill_attention_cublas = false;
        const std::size_t need = cuda_forward::device_bytes(c, fo);
        if (!fits(need)) {
          r.points.push_back({"ar", b, ctx, true, "bf16 cache: needs " + fixed(double(need) / gib, 1) + " GiB"});
        } else {
          cuda_forward fwd(*gpu, fo);
          for (int i = 0; i < int(b); ++i) fwd.fill_random_kv(i, ctx, 100 + std::uint64_t(i));
          const auto toks = tokens(std::size_t(b));
          const auto t = time_events(fwd.stream(), o.warmup, o.repeats, [&] { fwd.decode(slots, toks); });
          ar = t.median;
          const double bytes = wbytes + double(b) * double(ctx) * kv_tok;
          r.points.push_back({"ar", b, ctx, false, "16-bit weights, bf16 cache", t.median, t.spread,
                              double(b) / (t.median * 1e-3), bytes, bytes / r.copy_bandwidth * 1e3, used_gib()});
        }
      }
      // 2. QuantSpec's forwards over one hierarchical cache.
      cuda_forward_options fo;
      fo.max_batch = int(b);
      fo.max_context = ctx + std::max<std::int64_t>(steps, q.tokens + std::int64_t(o.warmup + 2) * (gamma + 1)) + 16;
      fo.prefill_chunk = 16;
      fo.prefill_attention_cublas = false;
      fo.kv = hier;
      fo.kv_staging_tokens = 0;
      fo.kv_max_append = 16;
      fo.max_step_tokens = gamma + 1;
      if (o.draft_gemv != 0) fo.int4_gemv_version = o.draft_gemv;
      if (o.fuse_swiglu) fo.fuse_swiglu = *o.fuse_swiglu;  // the target's bf16 GEMV and the draft's 4-bit one
      if (o.fuse_norm) fo.fuse_norm = *o.fuse_norm;
      if (o.fuse_rope) fo.fuse_rope = *o.fuse_rope;
      fo.packed_lane_order = o.packed_lane_order;
      fo.packed_stages = o.packed_stages;
      fo.packed_blocks = o.packed_blocks;  // the draft's INT4 read (the verify's INT8 keeps 3 blocks)
      const std::size_t need = cuda_forward::device_bytes(c, fo);
      if (!fits(need)) {
        r.points.push_back({"quantspec", b, ctx, true, "hier cache: needs " + fixed(double(need) / gib, 1) + " GiB"});
        continue;
      }
      cuda_forward fwd(*gpu, fo);
      auto refill = [&] {
        for (int i = 0; i < int(b); ++i) fwd.fill_random_kv(i, ctx, 200 + std::uint64_t(i));
      };
      refill();
      const std::int64_t nq = quantized_tokens(ctx, G, hier.flush_at());
      const double kv8 = double(nq) * cuda_forward::kv_bytes_per_token(c, hier) + double(ctx - nq) * kv_tok;
      kv_mode hier4 = hier;
      hier4.bits = 4;
      const double kv4 = double(nq) * cuda_forward::kv_read_bytes_per_token(c, hier4) + double(ctx - nq) * kv_tok;
      const auto toks = tokens(std::size_t(b));
      // Target step: 16-bit weights, INT8 reads.
      fwd.set_draft_weights(false);
      fwd.set_kv_read(8);
      const auto tt = time_events(fwd.stream(), o.warmup, o.repeats, [&] { fwd.decode(slots, toks); });
      const double tbytes = wbytes + double(b) * kv8;
      r.points.push_back({"target", b, ctx, false, "16-bit weights, INT8 KV", tt.median, tt.spread,
                          double(b) / (tt.median * 1e-3), tbytes, tbytes / r.copy_bandwidth * 1e3, used_gib()});
      // Draft step: 4-bit weights, INT4 reads.
      refill();
      fwd.set_draft_weights(true);
      fwd.set_kv_read(4);
      const auto td = time_events(fwd.stream(), o.warmup, o.repeats, [&] { fwd.decode(slots, toks); });
      // The packed projections (and lm_head, --draft-lm-head; else the shared
      // bf16 one), the INT4 cache.
      const double head = gpu->draft_lm_head() ? 0.0 : double(c.vocab_size * c.hidden_size * 2);
      const double dbytes = double(gpu->draft_bytes()) + head + double(b) * kv4;
      const double cost = td.median / tt.median;
      bench_point dp{"draft", b, ctx, false, "4-bit weights, INT4 KV; c = " + fixed(cost, 3) + " of target", td.median,
                     td.spread, double(b) / (td.median * 1e-3), dbytes, dbytes / r.copy_bandwidth * 1e3, used_gib()};
      dp.extra = {{"cost_ratio", cost}};
      if (ar > 0) dp.extra.emplace_back("draft_over_ar", td.median / ar);
      r.points.push_back(dp);
      // Verify: gamma + 1 rows per sequence, rolled back after each.
      refill();
      fwd.set_draft_weights(false);
      fwd.set_kv_read(8);
      const auto vt = tokens(std::size_t(b) * std::size_t(gamma + 1));
      std::vector<std::int64_t> lens(slots.size());
      for (std::size_t i = 0; i < slots.size(); ++i) lens[i] = fwd.length(slots[i]);
      const auto tv = time_events(fwd.stream(), o.warmup, o.repeats, [&] {
        fwd.extend(slots, gamma + 1, vt);
        for (std::size_t i = 0; i < slots.size(); ++i) fwd.truncate(slots[i], lens[i]);
      });
      bench_point vp{"verify", b, ctx, false,
                     std::to_string(gamma + 1) + " rows/sequence, INT8 KV; " + fixed(tv.median / tt.median, 2) +
                         "x the target step",
                     tv.median, tv.spread, 0, tbytes, tbytes / r.copy_bandwidth * 1e3, used_gib()};
      vp.extra = {{"verify_over_target_step", tv.median / tt.median}};
      r.points.push_back(vp);
      // Measured rounds from a fresh fill.
      refill();
      sampling_params greedy;
      greedy.temperature = 0;
      cuda_quantspec qs(fwd, greedy, gopts);
      std::vector<std::int32_t> pending = tokens(std::size_t(b));
      for (int i = 0; i < o.warmup; ++i) {
        const auto rounds = qs.round(slots, pending);
        for (std::size_t s = 0; s < rounds.size(); ++s) pending[s] = rounds[s].tokens.back();
      }
      const spec_decode_stats warm = qs.stats();
      std::int64_t done = 0, rounds_run = 0;
      kc::event_timer et;
      et.start(fwd.stream());
      while (done < q.tokens * b) {
        const auto rounds = qs.round(slots, pending);
        for (std::size_t s = 0; s < rounds.size(); ++s) {
          done += std::int64_t(rounds[s].tokens.size());
          pending[s] = rounds[s].tokens.back();
        }
        ++rounds_run;
      }
      et.stop(fwd.stream());
      const double total_ms = et.elapsed_ms();
      spec_decode_stats st = qs.stats();
      const double drafted = double(st.draft_tokens - warm.draft_tokens);
      const double kept = double(st.accepted_tokens - warm.accepted_tokens);
      const double alpha = drafted > 0 ? kept / drafted : 0;
      const double tps = 1e3 * double(done) / total_ms;
      const double round_ms = gamma * td.median + tv.median;
      bench_point qp{"quantspec", b, ctx, false,
                     "measured rounds: acceptance " + fixed(100 * alpha, 1) + "%, " + fixed(double(done) / double(rounds_run * b), 2) +
                         " tokens/round" + (ar > 0 ? ", " + fixed(tps / (double(b) * 1e3 / ar), 2) + "x ar" : ""),
                     total_ms / double(rounds_run), 0, tps};
      qp.extra = {{"acceptance_rate", alpha},
                  {"round_ms_model", round_ms},
                  {"draft_ms", td.median},
                  {"verify_ms", tv.median},
                  {"target_ms", tt.median},
                  {"cost_ratio", cost}};
      if (ar > 0) {
        qp.extra.emplace_back("ar_ms", ar);
        qp.extra.emplace_back("speedup_vs_ar_measured", tps / (double(b) * 1e3 / ar));
        if (q.assume_acceptance > 0) {
          const double e = expected_tokens(q.assume_acceptance, gamma);
          const double at_a = e * ar / round_ms;
          qp.extra.emplace_back("speedup_at_assumed_acceptance", at_a);
          r.notes.push_back("context " + std::to_string(ctx) + ", batch " + std::to_string(b) + ": at acceptance " +
                            fixed(100 * q.assume_acceptance, 0) + "% a round of " + std::to_string(gamma) +
                            " drafts yields " + fixed(e, 2) + " tokens in " + fixed(round_ms, 3) + " ms (" +
                            std::to_string(gamma) + " x " + fixed(td.median, 3) + " + " + fixed(tv.median, 3) +
                            "): " + fixed(at_a, 2) + "x ar (" + fixed(ar, 3) + " ms/token)");
        }
      }
      r.points.push_back(qp);
    }
  return r;
}

#endif

}  // namespace specpipe::apps
