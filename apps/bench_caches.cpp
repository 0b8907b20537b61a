// `specpipe bench --device cpu --kv full,kivi:1,specache,specache-output`: the
// KV cache modes through the actor pipeline on the CPU backend. Per context,
// batch and mode: decode step time and tokens/s (batch sequences stepped
// together by one worker), memory per sequence on the "device" (what a GPU
// would hold: packed codes plus an f16 window) and in the host store, and
// for SpeCache the 16-bit bytes fetched per step, the top-k hit rate, the
// speculative token's match rate and the share of transfer time hidden
// under compute (from the run's own trace).
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <random>

#include "actors/actor_runtime.hpp"
#include "actors/cpu_step_compute.hpp"
#include "actors/model_sampling.hpp"
#include "actors/pipeline.hpp"
#include "actors/specache_step_compute.hpp"
#include "actors/trace_summary.hpp"
#include "apps/bench.hpp"
#include "apps/cli_support.hpp"
#include "memory/kv_layout.hpp"

namespace specpipe::apps {
namespace {

// Device bytes of one sequence of `tokens` tokens in `mode`, the window in
// f16 as a device keeps it (memory/kv_layout.hpp's accounting).
double device_bytes(const kv_mode& mode, const model_config& c, std::int64_t tokens) {
  if (mode.format == kv_format::full) return double(fp16_bytes(tokens, c.head_dim, c.num_key_value_heads, c.num_hidden_layers));
  const kv_layout l = mode.layout(c);
  const std::int64_t q = quantized_tokens(tokens, mode.group, mode.flush_at());
  return double(l.bytes(q, tokens - q, 2));
}

std::string mode_name(const kv_mode& m) { return m.format == kv_format::full ? "full" : m.describe(); }

}  // namespace

bench_report run_cache_bench(const bench_options& o, const std::vector<kv_mode>& modes) {
  using clock = std::chrono::steady_clock;
  bench_report r;
  r.device_name = "CPU backend, actor pipeline";
  if (o.transfer_latency_us > 0)
    r.notes.push_back("every gather waits " + std::to_string(o.transfer_latency_us) + " us first (a slower link)");
  r.notes.push_back("each point decodes `repeats` tokens per sequence after a prefill of `context` random tokens; "
                    "batch sequences share one worker's steps; device memory counts the packed codes and an f16 "
                    "window as a GPU would hold them");
  const auto& c = o.config;
  cpu_bench_model bm;
  load_cpu_bench_model(o, bm);
  std::mt19937 rng(3);
  for (const long long ctx : o.contexts)
    for (const long long b : o.batches)
      for (const auto& mode : modes) {
        const std::int64_t n = o.repeats, max_ctx = ctx + n + 1;
        if (max_ctx > c.max_position_embeddings) {
          r.points.push_back({"decode", b, ctx, true, mode_name(mode) + ": beyond the model's positions"});
          continue;
        }
        const auto trace = std::filesystem::temp_directory_path() /
                           ("specpipe_bench_" + std::to_string(::getpid()) + "_" + std::to_string(r.points.size()) +
                            ".json");
        actor_runtime rt;
        pipeline_options po;
        po.max_context = max_ctx;
        po.max_sequences_per_worker = std::int32_t(b);
        po.topk = mode.topk;
        // One character per token, so every token reaches the delta callback
        // (and its arrival time is known).
        po.detokenize = [](std::span<const std::int32_t> ids) { return std::string(ids.size(), 'x'); };
        po.make_picker = model_picker_factory();
        po.trace = mode.speculative();
        po.transfer.extra_latency = std::chrono::microseconds(o.transfer_latency_us);
        po.trace_file = trace;
        std::shared_ptr<step_compute> compute;
        if (mode.speculative()) {
          compute = make_specache_step_compute(c, bm.weights, {max_ctx, 0, specache_config_of(mode)});
        } else {
          cpu_step_options co{max_ctx, 0, {}};
          if (mode.format != kv_format::full) co.make_cache = kv_cache_factory(mode);
          compute = make_cpu_step_compute(c, bm.weights, co);
        }
        specache_stats spec;
        // Token arrival times per sequence: decoding is timed over the span
        // in which every sequence decodes (after the last prefill, before
        // the first sequence ends), so a prefill never counts as a step.
        std::vector<std::vector<clock::time_point>> arrivals(static_cast<std::size_t>(b));
        {
          pipeline p(rt.system(), {compute}, po);
          std::vector<std::future<generation_result>> runs;
          for (long long i = 0; i < b; ++i) {
            generation_request req;
            req.prompt.resize(std::size_t(ctx));
            for (auto& t : req.prompt) t = std::int32_t(rng() % std::uint32_t(c.vocab_size));
            req.max_tokens = std::int32_t(n);
            req.sampling.temperature = 0;
            req.ignore_eos = true;
            auto* times = &arrivals[std::size_t(i)];
            times->reserve(std::size_t(n));
            runs.push_back(std::async(std::launch::async, [&p, req, i, times] {
              return p.generate(std::uint64_t(i + 1), req, [times](std::string_view d) {
                for (std::size_t k = 0; k < d.size(); ++k) times->push_back(clock::now());
              });
            }));
          }
          for (auto& f : runs) f.get();
          spec = p.stats().specache;
        }
        clock::time_point from = arrivals[0].front(), to = arrivals[0].back();
        for (const auto& a : arrivals) {
          from = std::max(from, a.front());
          to = std::min(to, a.back());
        }
        std::int64_t forwards = 0;
        for (const auto& a : arrivals)
          for (const auto t : a) forwards += t > from && t <= to;
        const double decode_s = std::chrono::duration<double>(to - from).count();
        if (forwards < 2 * b || decode_s <= 0) {
          std::error_code ec;
          std::filesystem::remove(trace, ec);
          // Two causes: no overlap of the sequences' decodes, or an overlap
          // too short (each sequence's first token is not timed).
          const std::string why =
              decode_s <= 0 ? "the sequences never decoded at the same time (a prefill took longer than another's "
                              "whole decode)"
                            : std::to_string(forwards) + " token(s) decoded while every sequence decoded, " +
                                  std::to_string(2 * b) +
                                  " needed (2 a sequence; the first token of each is not timed)";
          r.points.push_back({"decode", b, ctx, true, mode_name(mode) + ": " + why + ": raise --repeats"});
          continue;
        }
        bench_point pt;
        pt.kind = "decode";
        pt.batch = b;
        pt.context = ctx;
        pt.note = mode_name(mode);
        const double steps = double(forwards) / double(b);
        pt.ms = steps > 0 ? decode_s * 1e3 / steps : 0;
        pt.tokens_per_s = decode_s > 0 ? double(forwards) / decode_s : 0;
        const double dev = device_bytes(mode, c, ctx + n);
        const double host = mode.speculative() ? double(fp16_bytes(ctx + n, c.head_dim, c.num_key_value_heads,
                                                                   c.num_hidden_layers))
                                               : 0.0;
        const double full = double(fp16_bytes(ctx + n, c.head_dim, c.num_key_value_heads, c.num_hidden_layers));
        pt.extra = {{"device_MiB_per_seq", dev / (1 << 20)},
                    {"device_vs_fp16", dev / full},
                    {"host_MiB_per_seq", host / (1 << 20)}};
        char buf[256];
        std::snprintf(buf, sizeof buf, " | dev %.2f MiB/seq (%.3fx fp16)", dev / (1 << 20), dev / full);
        pt.note += buf;
        if (mode.speculative()) {
          double hidden = 0;
          try {
            hidden = summarize(load_trace(trace)).overlap_pct;
          } catch (const std::exception&) {
            hidden = -1;  // no trace: reported as unknown
          }
          if (!std::getenv("SPECPIPE_KEEP_TRACE")) std::filesystem::remove(trace);
          const double per_step = spec.steps > 0 ? double(spec.bytes_fetched) / double(spec.steps) : 0;
          pt.extra.push_back({"host_fetch_KiB_per_step", per_step / 1024});
          pt.extra.push_back({"topk_hit_rate", spec.hit_rate()});
          pt.extra.push_back({"spec_token_match", spec.guess_rate()});
          pt.extra.push_back({"transfer_hidden_pct", hidden});
          std::snprintf(buf, sizeof buf, " | fetch %.1f KiB/step, hit %.1f%%, spec match %.1f%%, hidden %.0f%%",
                        per_step / 1024, 100 * spec.hit_rate(), 100 * spec.guess_rate(), hidden);
          pt.note += buf;
        }
        r.points.push_back(std::move(pt));
      }
  return r;
}

}  // namespace specpipe::apps
