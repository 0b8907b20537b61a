// The CUDA measurements of `specpipe bench` (see bench.hpp): the whole-model
// decode steps of every mode; --kernels hands over to bench_cuda_kernels.cpp.
// Device times come from CUDA events after warm-up; each figure is the median
// of the repeats, and the roofline is bytes / the copy bandwidth measured in
// the same run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "apps/bench.hpp"
#include "apps/cli_support.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include <random>

#include "apps/bench_cuda_kernels.hpp"
#include "apps/bench_cuda_timing.hpp"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/device.hpp"
#include "memory/allocator.hpp"
#include "memory/kv_layout.hpp"
#include "model/cuda_forward.hpp"
#include "model/model.hpp"
#endif

namespace specpipe::apps {

#ifndef SPECPIPE_HAVE_CUDA

bench_report run_cuda_bench(const bench_options&) {
  throw usage_error("--device cuda: this build has no CUDA backend (configure with -DSPECPIPE_CUDA=ON)");
}

#else

namespace kc = kernels::cuda;

namespace {

using namespace cuda_bench;

// The GEMV v2 switches given on the command line, over cuda_forward's defaults.
void apply_gemv_flags(const bench_options& o, cuda_forward_options& fo) {
  fo.overlap_launch = o.overlap;
  if (o.fuse_swiglu) fo.fuse_swiglu = *o.fuse_swiglu;
  if (o.k_split) fo.gemv_k_split = *o.k_split;
  if (o.gemv_unroll) fo.gemv_unroll = *o.gemv_unroll;
}

std::string gemv_variant(const cuda_forward_options& fo) {
  return std::string(fo.overlap_launch ? "PDL GEMVs" : "no PDL") +
         (fo.fuse_swiglu ? ", SwiGLU in the gate/up GEMV" : ", SwiGLU kernel") +
         (fo.gemv_k_split ? ", k-split" : ", no k-split") + ", unroll " + std::to_string(fo.gemv_unroll);
}


// One eager SpeCache step with its timeline (events around every layer's
// compute, top-k and fetch): where the time of a speculative step goes, as
// "; one eager step: ..." for the bench line. The fetch's share inside the
// layers' spans is what really overlapped, and its total against the
// "alone" figure says whether it ran slower beside the compute.
std::string timeline_summary(cuda_forward& fwd, std::span<const int> slots, std::span<const std::int32_t> toks,
                             std::span<const std::int32_t> spec_toks) {
  fwd.specache_set_timeline(true);
  fwd.specache_step(slots, toks, spec_toks);
  const auto spans = fwd.specache_timeline();
  fwd.specache_set_timeline(false);
  double layers = 0, topk = 0, fetch = 0, fetch_inside = 0, last_layer = 0, last_fetch = 0;
  for (const auto& sp : spans) {
    const double d = sp.end_ms - sp.start_ms;
    const std::string_view name = sp.name;
    if (name == "layer") {
      layers += d;
      last_layer = std::max(last_layer, sp.end_ms);
    } else if (name == "top-k") {
      topk += d;
    } else if (name == "fetch") {
      fetch += d;
      last_fetch = std::max(last_fetch, sp.end_ms);
      for (const auto& ly : spans)
        if (std::string_view(ly.name) == "layer")
          fetch_inside += std::max(0.0, std::min(sp.end_ms, ly.end_ms) - std::max(sp.start_ms, ly.start_ms));
    }
  }
  return "; one eager step: layers " + fixed(layers, 3) + " ms, top-k " + fixed(topk, 3) + " ms, fetch " +
         fixed(fetch, 3) + " ms (" + fixed(fetch > 0 ? 100 * fetch_inside / fetch : 0, 0) +
         "% of it beside a layer), the last fetch ends " + fixed(last_fetch - last_layer, 3) +
         " ms after the last layer";
}

}  // namespace

bench_report run_cuda_bench(const bench_options& o) {
  bench_report r;
  kc::set_device(0);
  const auto props = kc::query_device(0);
  r.device_name = props.name + " (" + std::to_string(props.sm_count) + " SMs, " +
                  std::to_string(props.total_memory >> 30) + " GiB)";
  r.copy_bandwidth = kc::measure_copy_bandwidth(std::size_t(2) << 30, 20);
  if (o.kernels) {
    cuda_kernel_points(o, r, props);
    return r;
  }
  const auto& c = o.config;
  std::optional<model> host;
  std::optional<cuda_model> gpu;
  if (!o.model_dir.empty()) {
    host.emplace(model::load(o.model_dir));
    gpu.emplace(host->config, host->weights, 0);
    r.notes.push_back("weights loaded from " + o.model_dir);
  } else {
    gpu.emplace(cuda_model::random(c, 42));
    r.notes.push_back("random weights generated on the GPU (shapes of preset " + o.model_name + ")");
  }
  r.notes.push_back("decode: the KV cache is filled with random values for the context instead of a prefill; "
                    "each step then appends one token per sequence");
  const double wbytes = double(cuda_model::weight_bytes(c));
  const double kv_tok = double(cuda_forward::kv_bytes_per_token(c));
  std::mt19937 rng(3);
  auto tokens = [&](std::size_t n) {
    std::vector<std::int32_t> t(n);
    for (auto& x : t) x = std::int32_t(rng() % std::uint32_t(c.vocab_size));
    return t;
  };

  // Prefill with the tensor-core (cuBLAS) attention, then with the CUDA-core
  // flash kernel of v1 as the baseline of the same run.
  for (const bool tensor_cores : {true, false}) {
    if (o.prefill_tokens <= 0) break;
    cuda_forward_options fo;
    fo.max_batch = 1;
    fo.max_context = o.prefill_tokens;
    fo.use_graphs = o.graphs;
    apply_gemv_flags(o, fo);
    fo.prefill_attention_cublas = tensor_cores;
    const std::string how = tensor_cores ? "cuBLAS attention" : "flash attention (CUDA cores)";
    if (cuda_forward::device_bytes(c, fo) > kc::query_memory().free) {
      r.points.push_back({"prefill", 1, o.prefill_tokens, true, how + ": does not fit in free GPU memory"});
    } else {
      cuda_forward fwd(*gpu, fo);
      const auto prompt = tokens(std::size_t(o.prefill_tokens));
      const int reps = std::max(1, std::min(o.repeats, 5));
      const auto t = time_events(fwd.stream(), std::min(o.warmup, 1), reps, [&] {
        fwd.truncate(0, 0);
        fwd.prefill(0, prompt);
      });
      r.points.push_back({"prefill", 1, o.prefill_tokens, false,
                          "chunks of " + std::to_string(fo.prefill_chunk) + ", " + how, t.median, t.spread,
                          double(o.prefill_tokens) / (t.median * 1e-3), wbytes, 0, used_gib()});
    }
  }

  const std::vector<kv_mode> modes = o.kv_modes.empty() ? std::vector<kv_mode>{kv_mode{}} : o.kv_modes;
  // --gpu-memory: what the weights leave of the budget for each forward.
  const double budget = o.gpu_memory_gib > 0 ? o.gpu_memory_gib * gib : double(props.total_memory);
  if (o.gpu_memory_gib > 0)
    r.notes.push_back("GPU memory budget " + fixed(o.gpu_memory_gib, 1) + " GiB: weights " + fixed(wbytes / gib, 2) +
                      " GiB + each configuration's caches and scratch must fit");
  auto options_for = [&](long long ctx, long long b, const kv_mode& mode) {
    cuda_forward_options fo;
    fo.max_batch = int(b);
    // Room for the timed steps (specache times up to three loops).
    fo.max_context = ctx + 3 * (o.warmup + o.repeats) + 2;
    fo.prefill_chunk = 16;  // decode-only: keep the prefill scratch small
    fo.prefill_attention_cublas = false;
    fo.use_graphs = o.graphs;
    fo.kv = mode;
    fo.kv_staging_tokens = 0;  // decode-only: no prefill staging area
    fo.packed_stages = o.packed_stages;
    fo.packed_blocks = o.packed_blocks;
    fo.packed_lane_order = o.packed_lane_order;
    if (mode.speculative()) {
      // SpeCache: the host store, as long as --host-memory allows (positions
      // alias modulo a shorter store beyond that: the same rows' bytes move).
      fo.specache_fetch = true;
      using choice = cuda_forward_options::specache_block_choice;
      fo.specache_blocks = o.specache_blocks == "shared"    ? choice::shared
                           : o.specache_blocks == "per-row" ? choice::per_row
                                                            : choice::automatic;
      const double per_token = double(cuda_forward::specache_host_bytes(c, fo)) / double(fo.max_context);
      fo.specache_store_tokens =
          std::max<std::int64_t>(1, std::min<std::int64_t>(fo.max_context, std::int64_t(o.host_memory_gib * gib / per_token)));
    }
    apply_gemv_flags(o, fo);
    return fo;
  };
  auto fits_budget = [&](const cuda_forward_options& fo) {
    return wbytes + double(cuda_forward::device_bytes(c, fo)) <= budget;
  };
  // The largest batch whose caches fit the budget (0: not even one sequence).
  auto largest_batch = [&](long long ctx, const kv_mode& mode) -> long long {
    long long lo = 0, hi = 4096;
    while (lo < hi) {
      const long long mid = (lo + hi + 1) / 2;
      if (fits_budget(options_for(ctx, mid, mode))) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  for (const long long ctx : o.contexts) {
    std::vector<std::pair<long long, kv_mode>> runs;
    if (o.max_batch) {
      for (const kv_mode& mode : modes) {
        long long b = 0;
        try {
          b = largest_batch(ctx, mode);
        } catch (const std::invalid_argument& e) {
          r.points.push_back({"decode", 0, ctx, true, mode.describe() + ": " + e.what()});
          continue;
        }
        if (b == 0) {
          r.points.push_back({"decode", 0, ctx, true,
                              (mode.format == kv_format::full ? std::string("full (bf16)") : mode.describe()) +
                                  ": not one sequence fits the budget"});
          continue;
        }
        runs.emplace_back(b, mode);
      }
    } else {
      for (const long long b : o.batches)
        for (const kv_mode& mode : modes) runs.emplace_back(b, mode);
    }
    std::vector<std::pair<std::string, double>> at_max;  // mode, tokens/s at its max batch
    for (const auto& [b, mode] : runs) {
        const bool full = mode.format == kv_format::full;
        const std::string label = full ? std::string("full (bf16)") : mode.describe();
        cuda_forward_options fo = options_for(ctx, b, mode);
        std::size_t need = 0;
        try {
          need = cuda_forward::device_bytes(c, fo);
        } catch (const std::invalid_argument& e) {
          r.points.push_back({"decode", b, ctx, true, label + ": " + e.what()});
          continue;
        }
        if (o.gpu_memory_gib > 0 && !fits_budget(fo)) {
          r.points.push_back({"decode", b, ctx, true,
                              label + ": weights + " + fixed(double(need) / gib, 2) + " GiB exceed --gpu-memory " +
                                  fixed(o.gpu_memory_gib, 1)});
          continue;
        }
        const std::size_t free = kc::query_memory().free;
        if (need + (std::size_t(512) << 20) > free) {
          r.points.push_back({"decode", b, ctx, true,
                              label + ": needs " + std::to_string(double(need) / gib).substr(0, 6) + " GiB, " +
                                  std::to_string(double(free) / gib).substr(0, 6) + " GiB free"});
          continue;
        }
        cuda_forward fwd(*gpu, fo);
        std::vector<int> slots(static_cast<std::size_t>(b));
        for (int i = 0; i < int(b); ++i) {
          slots[std::size_t(i)] = i;
          fwd.fill_random_kv(i, ctx, 100 + std::uint64_t(i));
        }
        const auto toks = tokens(std::size_t(b));
        const auto spec_toks = tokens(std::size_t(b));
        const bool spec = mode.speculative(), output = spec && mode.prefetch == specache_prefetch::output;
        if (spec && !output) fwd.specache_predecode(slots, toks);  // seeds the first rows
        const std::int64_t fetched_before = fwd.specache_rows_fetched();
        const auto t = time_events(fwd.stream(), o.warmup, o.repeats, [&] {
          if (output) fwd.specache_output_step(slots, toks);
          else if (spec) fwd.specache_step(slots, toks, spec_toks);
          else fwd.decode(slots, toks);
        });
        // Per step: every weight once, and each sequence's K/V: ctx bf16 rows
        // per layer, or its packed tokens at the mode's bytes per token plus
        // the bf16 window (the steps add warmup + repeats tokens at most).
        double kv_read = double(ctx) * kv_tok;
        if (!full) {
          const std::int64_t q = quantized_tokens(ctx, mode.group, mode.flush_at());
          kv_read = double(q) * cuda_forward::kv_read_bytes_per_token(c, mode) + double(ctx - q) * kv_tok;
        }
        const double bytes = wbytes + double(b) * kv_read;
        const double kv_gib = double(cuda_forward::kv_device_bytes(c, fo)) / gib;
        char mem[160];
        std::snprintf(mem, sizeof mem, "KV on device %.2f GiB (%.1f B/token, %.4fx bf16)", kv_gib,
                      cuda_forward::kv_bytes_per_token(c, mode), cuda_forward::kv_bytes_per_token(c, mode) / kv_tok);
        std::string how = label + ", " + mem + ", " + (o.graphs ? "CUDA graph, " : "eager launches, ") +
                          gemv_variant(fo);
        if (full) {
          // The attention split count the step was captured with (v2 takes the
          // blocks per SM from the occupancy; v1 assumed 2).
          const int bps = kc::decode_attention_blocks_per_sm(int(c.num_attention_heads),
                                                             int(c.num_key_value_heads), int(c.head_dim));
          const int splits = kc::decode_attention_splits(int(b), int(c.num_key_value_heads), fo.max_context,
                                                         props.sm_count, fo.max_splits, bps);
          how += ", attention splits " + std::to_string(splits) + " (" + std::to_string(bps) + " blocks/SM)";
        } else {
          how += std::string(", packed attention ") +
                 (fwd.packed_lane_order() ? "v4 (lane order" : "v3 (cpu order, lean smem, combine 1") +
                 ", >= 16 tiles/split), " +
                 (fo.packed_stages > 0 ? std::to_string(fo.packed_stages) : std::string("per-format")) + " stages" +
                 (fwd.packed_lane_order() && fo.packed_blocks == 4 ? ", 128-register budget (4 blocks/SM)" : "");
        }
        // Speculative prefetch: the same step without its fetch, and the
        // fetch alone (top-k and row reads of every layer on one stream):
        // the share of the fetch the step hides is 1 - (step - step without
        // fetch) / fetch alone.
        double hidden = -1, alone_ms = 0, bare_ms = 0;
        std::string timeline;
        if (spec && !output) {
          fwd.specache_set_fetch(false);
          bare_ms = time_events(fwd.stream(), o.warmup, o.repeats, [&] { fwd.specache_step(slots, toks, spec_toks); })
                        .median;
          fwd.specache_set_fetch(true);
          alone_ms = time_events(fwd.stream(), o.warmup, o.repeats, [&] { fwd.specache_plan_and_fetch(); }).median;
          hidden = std::clamp(1.0 - (t.median - bare_ms) / alone_ms, 0.0, 1.0);
          timeline = timeline_summary(fwd, slots, toks, spec_toks);
        }
        double link_bytes = 0;
        if (spec) {
          // Rows fetched per step (every layer and KV head), their bytes over
          // the link, and the pinned store.
          const double steps = double(o.warmup + o.repeats);
          link_bytes = double(fwd.specache_rows_fetched() - fetched_before) / steps * double(4 * c.head_dim);
          how += ", " + std::string(output ? "output prefetch (fetch waited for)"
                                        : fwd.specache_shared_blocks() ? "speculative prefetch (2 rows/seq, one block)"
                                                                       : "speculative prefetch (2 rows/seq, a block each)") +
                 ", top-k " + std::to_string(mode.topk) + ": " + fixed(link_bytes / double(1 << 20), 2) +
                 " MiB fetched per step (" + fixed(link_bytes / 55e9 * 1e3, 3) + " ms at 55 GB/s), host store " +
                 fixed(double(fwd.specache_host_bytes()) / gib, 2) + " GiB (" +
                 fixed(double(fwd.specache_host_bytes()) / double(b) / gib, 3) + " GiB per sequence)" +
                 (fo.specache_store_tokens < fo.max_context
                      ? " (" + std::to_string(fo.specache_store_tokens) + " rows per sequence, aliased)"
                      : std::string());
          if (hidden >= 0)
            how += "; top-k + fetch alone " + fixed(alone_ms, 3) + " ms, step without them " + fixed(bare_ms, 3) +
                   " ms: " + fixed(100 * hidden, 0) + "% of the fetch hidden" + timeline;
        }
        if (o.max_batch) {
          how = "max batch under " + fixed(budget / gib, 1) + " GiB; per sequence on the GPU " +
                fixed(double(cuda_forward::kv_device_bytes(c, fo)) / double(b) / gib, 3) + " GiB; " + how;
          at_max.emplace_back(label + " b=" + std::to_string(b), double(b) / (t.median * 1e-3));
        }
        r.points.push_back({"decode", b, ctx, false, how, t.median, t.spread, double(b) / (t.median * 1e-3), bytes,
                            bytes / r.copy_bandwidth * 1e3, used_gib()});
        if (spec) {
          r.points.back().extra.emplace_back("fetched_bytes_per_step", link_bytes);
          r.points.back().extra.emplace_back("host_store_bytes", double(fwd.specache_host_bytes()));
          if (hidden >= 0) {
            r.points.back().extra.emplace_back("fetch_alone_ms", alone_ms);
            r.points.back().extra.emplace_back("step_without_fetch_ms", bare_ms);
            r.points.back().extra.emplace_back("fetch_hidden_share", hidden);
          }
        }
    }
    if (at_max.size() > 1) {
      std::string line = "context " + std::to_string(ctx) + ", throughput at the max batch:";
      for (const auto& [what, tps] : at_max)
        line += " " + what + " " + fixed(tps, 1) + " tok/s (" + fixed(tps / at_max.front().second, 2) + "x),";
      line.pop_back();
      r.notes.push_back(line + " (ratios to the first mode)");
    }
  }
  return r;
}

#endif

}  // namespace specpipe::apps
