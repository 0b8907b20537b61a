// `specpipe bench`: prefill and decode throughput of the full-precision path
// against the roofline measured in the same run; `--kernels` times decode
// attention and the decode GEMV alone; `--memory-only` runs nothing and
// reports the KV bytes of each cache format against fp16; `--kv quantspec`
// times QuantSpec against autoregressive decoding (bench_quantspec.cpp on the
// CPU, bench_quantspec_cuda.cpp on the GPU).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>

#include "actors/actor_overhead.hpp"
#include "apps/bench.hpp"
#include "apps/cli_support.hpp"
#include "apps/commands.hpp"
#include "apps/eval_modes.hpp"
#include "memory/allocator.hpp"
#include "memory/kv_layout.hpp"
#include "model/forward.hpp"
#include "model/kv_mode.hpp"
#include "model/model.hpp"
#include "model/presets.hpp"

namespace specpipe::apps {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

void print_table(const bench_options& o, const bench_report& r) {
  std::printf("\nspecpipe bench: %s on %s (%s)\n", o.model_name.c_str(), o.device.c_str(), r.device_name.c_str());
  if (r.copy_bandwidth > 0)
    std::printf("measured device copy bandwidth: %.0f GB/s (read + write)\n", r.copy_bandwidth / 1e9);
  for (const auto& n : r.notes) std::printf("note: %s\n", n.c_str());
  std::printf("%-9s %6s %8s %10s %9s %11s %10s %7s %8s  %s\n", "kind", "batch", "context", "median_ms",
              "spread", "tokens/s", "floor_ms", "floor%", "peakGiB", "");
  for (const auto& p : r.points) {
    if (p.skipped) {
      std::printf("%-9s %6lld %8lld %10s  skipped: %s\n", p.kind.c_str(), p.batch, p.context, "-", p.note.c_str());
      continue;
    }
    const double pct = p.roofline_ms > 0 ? 100.0 * p.roofline_ms / p.ms : 0;
    std::printf("%-9s %6lld %8lld %10.3f %9.3f %11.1f %10.3f %6.1f%% %8.2f  %s\n", p.kind.c_str(), p.batch,
                p.context, p.ms, p.ms_spread, p.tokens_per_s, p.roofline_ms, pct, p.peak_gib, p.note.c_str());
  }
  std::fflush(stdout);
}

// The --kv list, MODE[:BITS] items (apps/eval_modes.hpp's syntax). An item
// without bits takes --kv-bits where that is valid for its format (kivi
// 1/2/4, hier 4/8), else the format's default; --group and --residual apply
// to the formats that take them.
std::vector<kv_mode> parse_bench_modes(const std::string& text, int bits, long long group, long long residual,
                                       int topk) {
  std::vector<kv_mode> out;
  for (const auto& item : parse_eval_modes(text, 0)) {
    // specache-output: SpeCache with the paper's non-speculative prefetch.
    const bool output = item.name == "specache-output";
    const std::string kind = output ? "specache" : item.name;
    int b = item.bits;
    if (b == 0 && ((kind == "kivi" && (bits == 1 || bits == 2 || bits == 4)) || (kind == "hier" && (bits == 4 || bits == 8))))
      b = bits;
    try {
      out.push_back(parse_kv_mode(kind, b, kind == "full" ? 0 : group, kind == "kivi" || kind == "specache" ? residual : 0));
      set_specache_flags(out.back(), kind == "specache" ? topk : 64, output ? "output" : "speculative");
    } catch (const std::invalid_argument& e) {
      throw usage_error(std::string("--kv ") + item.label() + ": " + e.what());
    }
  }
  return out;
}

// KV bytes per sequence of each format at each context, as the decode loop
// leaves them (tokens appended one at a time; memory/kv_layout.hpp's
// quantized_tokens), with the full-precision window in f16 as a device holds
// it.
int memory_report(const bench_options& o, const std::vector<kv_mode>& modes, const std::string& json_path) {
  const auto& c = o.config;
  boost::json::array rows;
  std::printf("\nspecpipe bench --memory-only: %s (%lld layers, %lld KV heads, head_dim %lld)\n", o.model_name.c_str(),
              static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.num_key_value_heads),
              static_cast<long long>(c.head_dim));
  std::printf("%-30s %8s %12s %12s %9s %14s %9s\n", "format", "context", "B/token", "packed B/tok", "window",
              "MiB/sequence", "vs fp16");
  for (const long long ctx : o.contexts) {
    const double fp16 = double(fp16_bytes(ctx, c.head_dim, c.num_key_value_heads, c.num_hidden_layers));
    for (const kv_mode& m : modes) {
      double total = fp16, packed_per_token = 0;
      long long window = ctx;
      if (m.format != kv_format::full) {
        const kv_layout l = m.layout(c);
        const std::int64_t q = quantized_tokens(ctx, m.group, m.flush_at());
        window = ctx - q;
        total = double(l.bytes(q, window, 2));
        packed_per_token = double(l.key_group_bytes()) / double(l.group) + double(l.value_token_bytes());
        packed_per_token *= double(l.n_kv_heads * l.n_layers);
      }
      const std::string name = m.format == kv_format::full ? "full (fp16)" : m.describe();
      std::printf("%-30s %8lld %12.1f %12.1f %9lld %14.2f %8.4fx\n", name.c_str(), ctx, total / double(ctx),
                  packed_per_token, window, total / double(1 << 20), total / fp16);
      boost::json::object j;
      j["format"] = kv_format_name(m.format);
      j["description"] = name;
      j["bits"] = m.bits;
      j["group"] = m.group;
      j["residual"] = m.residual;
      j["context"] = ctx;
      j["bytes_per_token"] = total / double(ctx);
      j["packed_bytes_per_token"] = packed_per_token;
      j["window_tokens"] = window;
      j["bytes_per_sequence"] = total;
      j["fp16_bytes_per_sequence"] = fp16;
      j["ratio_to_fp16"] = total / fp16;
      rows.emplace_back(std::move(j));
    }
  }
  std::printf("note: windows counted at 2 bytes per element (f16, as a device keeps them); the CPU backend keeps "
              "them in f32\n");
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    if (!out) throw std::runtime_error("--json: cannot write '" + json_path + "'");
    boost::json::object root;
    root["model"] = o.model_name;
    root["memory"] = std::move(rows);
    out << boost::json::serialize(root) << "\n";
  }
  return 0;
}

// --actors: one greedy decode of the model timed as bare forward calls and
// through the actor pipeline, alternating, best of 5 rounds each.
int actor_report(const bench_options& o, const std::string& device) {
  constexpr std::int32_t prompt_tokens = 64, decode_tokens = 64;
  const model m = model::load(o.model_dir);
  std::vector<std::int32_t> prompt;
  for (std::int32_t i = 0; i < prompt_tokens; ++i)
    prompt.push_back(std::int32_t((97 * std::int64_t(i) + 11) % std::max<std::int64_t>(1, m.config.vocab_size)));
  const auto r = device == "cuda" ? measure_actor_overhead_cuda(m.config, m.weights, prompt, decode_tokens)
                                  : measure_actor_overhead(m.config, m.weights, prompt, decode_tokens);
  std::printf("specpipe bench --actors: %s, %d prompt tokens, %d generated\n", o.model_name.c_str(), prompt_tokens,
              decode_tokens);
  print_actor_overhead(std::cout, r);
  if (!r.same_tokens) throw std::runtime_error("--actors: the pipeline and the bare loop decoded different tokens");
  return 0;
}

int bench_main(int argc, char** argv) {
  po::options_description desc("specpipe bench flags");
  std::string preset, model_dir, batches = "1", contexts = "4096", json_path, device = "cuda", kv_kinds, packed_order;
  long long kv_group = 0, kv_residual = 0;
  int kv_bits = 0, topk = 64;
  bench_options o;
  quantspec_bench_options qso;
  desc.add_options()
    ("help,h", "show this help")
    ("preset", po::value(&preset), "model shape: llama3-8b, llama2-7b, mistral-7b or tiny (random weights)")
    ("model,m", po::value(&model_dir), "Hugging Face checkpoint directory (real weights)")
    ("device", po::value(&device)->default_value("cuda"), "cuda or cpu")
    ("batch", po::value(&batches)->default_value("1"), "decode batch sizes, e.g. 1,8,32")
    ("context", po::value(&contexts)->default_value("4096"), "context lengths, e.g. 4096,32k,128k")
    ("prefill-tokens", po::value(&o.prefill_tokens)->default_value(2048), "prompt length of the prefill measurement (CUDA; the CPU bench times the prefill of each --context)")
    ("repeats", po::value(&o.repeats)->default_value(20), "timed repeats per point (median reported)")
    ("warmup", po::value(&o.warmup)->default_value(5), "untimed runs before timing")
    ("json", po::value(&json_path), "also write the results as JSON to this file")
    ("gpu-memory", po::value(&o.gpu_memory_gib)->default_value(0.0),
     "CUDA decode: GiB the run may use on the GPU (weights + caches + scratch), e.g. 48 to emulate a 48 GB card; "
     "0: the whole device")
    ("host-memory", po::value(&o.host_memory_gib)->default_value(32.0),
     "CUDA decode, specache: pinned host memory for the 16-bit store; when every sequence's context does not fit, "
     "positions alias modulo a shorter store (same bytes fetched)")
    ("max-batch", "CUDA decode: time each --kv mode at the largest batch that fits --gpu-memory (instead of --batch)")
    ("kernels", "time decode attention and the decode GEMV alone against their rooflines (--device cpu: the CPU "
     "backend's decode attention, f32 and every packed format, at each --context and --batch)")
    ("gather-only", "with --kernels: only the sparse gather benchmarks (every path, row pattern and arena)")
    ("gemv-only", "with --kernels: only the GEMVs: the decode step's bf16 GEMVs at 1 and 2 rows, and the 4-bit "
     "weight GEMV of QuantSpec's draft, each version, llama shapes")
    ("attention-only", "with --kernels: only decode attention (bf16 and every packed format, SpeCache's side work, "
     "its top-k) and quantize-on-append")
    ("no-graphs", "launch decode kernels one by one instead of replaying a CUDA graph")
    ("no-overlap", "launch the GEMVs and the step's small kernels normally instead of as programmatic dependents (PDL)")
    ("actors", "time one greedy decode (64 + 64 tokens) through the actor pipeline against bare forward calls; "
     "needs --model (CPU or CUDA)")
    ("memory-only", "run nothing: KV bytes per token and per sequence of each --kv format against fp16")
    ("kv", po::value(&kv_kinds)->default_value("full,kivi,specache,hier"),
     "KV cache modes, MODE[:BITS],...: full, kivi, specache, hier (--memory-only: all four by default; CUDA "
     "decode: full unless given), quantspec (CPU or GPU), and on the CPU: full")
    ("kv-bits", po::value(&kv_bits)->default_value(0),
     "bits of the --kv modes given without :BITS, where valid: kivi (1/2/4) and hier (4/8)")
    ("group", po::value(&kv_group)->default_value(0), "quantization group G (0: each format's default)")
    ("residual", po::value(&kv_residual)->default_value(0), "kivi/specache window R (0: 64)")
    ("topk", po::value(&topk)->default_value(64), "specache: 16-bit rows fetched per layer and KV head")
    ("specache-blocks", po::value(&o.specache_blocks)->default_value("auto"),
     "cuda, specache: a slot's real and speculative rows in one multi-query attention block (shared: codes read "
     "once), one block each (per-row), or auto (shared over a lane-order cache)")
    ("transfer-latency-us", po::value(&o.transfer_latency_us)->default_value(0),
     "specache (CPU): microseconds added to every gather, emulating a slower host-to-device link")
    ("packed-stages", po::value(&o.packed_stages)->default_value(0),
     "CUDA decode: cp.async stages of the packed attention (2, 3 or 4; 0: per format)")
    ("packed-blocks", po::value(&o.packed_blocks)->default_value(0),
     "CUDA decode, lane order: the packed attention's register budget in resident blocks per SM, 3 (168 "
     "registers) or 4 (128, for the 1-4-bit reads; INT8 keeps 3); 0: the default (3)")
    ("packed-order", po::value(&packed_order)->default_value("lane"),
     "CUDA decode, quantized caches: lane (packed attention v4, head_dim 128) or cpu (v3)")
    ("draft-gemv", po::value(&o.draft_gemv)->default_value(0),
     "quantspec (cuda): the draft's 4-bit GEMV version, 2, 3, 4, 7 or 9 (7 and 9 read the weights "
     "repacked in 16-row tiles, 9 streams them by the bulk copy engine; 0: the default, 7)")
    ("gamma", po::value(&qso.gamma)->default_value("5"), "quantspec: draft tokens per round, or auto")
    ("weight-group", po::value(&qso.weight_group)->default_value(128),
     "quantspec: columns per scale of the 4-bit draft weights")
    ("draft-lm-head", po::bool_switch(&qso.quantize_lm_head), "quantspec: pack lm_head to 4 bits too")
    ("tokens", po::value(&qso.tokens)->default_value(64),
     "quantspec: tokens decoded per measurement (and by the ar baseline)")
    ("acceptance", po::value(&qso.assume_acceptance)->default_value(0.0),
     "quantspec: also report the speedup the measured costs give at this acceptance rate (0: off)")
    ("fuse-swiglu", "decode: the SwiGLU as the gate/up GEMV's epilogue (the default)")
    ("no-fuse-swiglu", "decode: the plain gate/up GEMV, then a SwiGLU kernel")
    ("fuse-norm", "quantspec (cuda): the draft's qkv and gate/up 4-bit GEMVs normalize their input (the default)")
    ("no-fuse-norm", "quantspec (cuda): an RMSNorm kernel before the draft's qkv and gate/up GEMVs")
    ("fuse-rope", "quantspec (cuda): the draft's qkv 4-bit GEMV applies RoPE and appends to the cache")
    ("no-fuse-rope", "quantspec (cuda): the RoPE-and-append kernel after the draft's qkv GEMV (the default)")
    ("ksplit", "decode GEMVs may split k across the warps of a block (v2; the default)")
    ("no-ksplit", "decode GEMVs keep one warp per row pair over the whole of k (v1)")
    ("gemv-unroll", po::value<int>(), "decode GEMV loads per row in flight per lane: 2 (v1, the default) or 4 (v2)");
  po::variables_map vm;
  if (!parse_flags(argc, argv, desc, vm, "usage: specpipe bench (--preset NAME | --model DIR) [flags]")) return 0;

  o.kernels = vm.count("kernels") > 0;
  o.gather_only = vm.count("gather-only") > 0;
  if (o.gather_only && !o.kernels) throw usage_error("--gather-only: needs --kernels");
  o.gemv_only = vm.count("gemv-only") > 0;
  if (o.gemv_only && !o.kernels) throw usage_error("--gemv-only: needs --kernels");
  o.attention_only = vm.count("attention-only") > 0;
  if (o.attention_only && !o.kernels) throw usage_error("--attention-only: needs --kernels");
  if (int(o.gather_only) + int(o.gemv_only) + int(o.attention_only) > 1)
    throw usage_error("--gather-only, --gemv-only and --attention-only are exclusive");
  o.graphs = vm.count("no-graphs") == 0;
  o.overlap = vm.count("no-overlap") == 0;
  const auto switch_flag = [&](const char* on, const char* off) -> std::optional<bool> {
    if (vm.count(on) && vm.count(off))
      throw usage_error(std::string("--") + on + " and --" + off + " are exclusive");
    if (vm.count(on)) return true;
    if (vm.count(off)) return false;
    return std::nullopt;
  };
  o.fuse_swiglu = switch_flag("fuse-swiglu", "no-fuse-swiglu");
  o.k_split = switch_flag("ksplit", "no-ksplit");
  o.fuse_norm = switch_flag("fuse-norm", "no-fuse-norm");
  o.fuse_rope = switch_flag("fuse-rope", "no-fuse-rope");
  if (vm.count("gemv-unroll")) {
    o.gemv_unroll = vm["gemv-unroll"].as<int>();
    if (*o.gemv_unroll != 2 && *o.gemv_unroll != 4)
      throw usage_error("--gemv-unroll: must be 2 or 4, got " + std::to_string(*o.gemv_unroll));
  }
  o.device = device;
  if (device != "cuda" && device != "cpu") throw usage_error("--device: '" + device + "' is not one of cpu, cuda");
  if (vm.count("preset") && vm.count("model")) throw usage_error("--preset and --model are exclusive");
  if (o.repeats < 1) throw usage_error("--repeats: must be >= 1, got " + std::to_string(o.repeats));
  if (o.warmup < 0) throw usage_error("--warmup: must be >= 0, got " + std::to_string(o.warmup));
  if (o.prefill_tokens < 0) throw usage_error("--prefill-tokens: must be >= 0");
  o.batches = parse_int_list("batch", batches);
  o.max_batch = vm.count("max-batch") > 0;
  if (!(o.gpu_memory_gib >= 0 && o.gpu_memory_gib <= 1e6))
    throw usage_error("--gpu-memory: must be >= 0 GiB, got " + std::to_string(o.gpu_memory_gib));
  if (!(o.host_memory_gib > 0 && o.host_memory_gib <= 1e6))
    throw usage_error("--host-memory: must be > 0 GiB, got " + std::to_string(o.host_memory_gib));
  if ((o.max_batch || o.gpu_memory_gib > 0) && device != "cuda")
    throw usage_error("--gpu-memory and --max-batch: the CUDA decode bench only (--device cuda)");
  if (o.max_batch && !vm["batch"].defaulted()) throw usage_error("--max-batch and --batch are exclusive");
  if (o.max_batch && o.kernels) throw usage_error("--max-batch: times decode steps, not --kernels");
  if (o.specache_blocks != "auto" && o.specache_blocks != "per-row" && o.specache_blocks != "shared")
    throw usage_error("--specache-blocks: must be auto, per-row or shared, got '" + o.specache_blocks + "'");
  if (!vm["specache-blocks"].defaulted() && device != "cuda")
    throw usage_error("--specache-blocks: the CUDA decode bench only");
  o.contexts = parse_int_list("context", contexts);
  if (vm.count("model")) {
    o.model_dir = model_dir;
    o.model_name = model_dir;
    o.config = load_model_config(std::filesystem::path(model_dir) / "config.json");
  } else {
    if (!vm.count("preset") && !o.kernels) throw usage_error("--preset or --model is required");
    o.model_name = vm.count("preset") ? preset : "llama3-8b";
    const auto c = preset_config(o.model_name);
    if (!c) throw usage_error("--preset: unknown preset '" + o.model_name + "' (known: " + join(preset_names()) + ")");
    o.config = *c;
  }
  if (o.transfer_latency_us < 0 || o.transfer_latency_us > 1000000)
    throw usage_error("--transfer-latency-us: must be in [0, 1000000], got " + std::to_string(o.transfer_latency_us));
  if (o.draft_gemv != 0 && (o.draft_gemv < 2 || o.draft_gemv > 4) && o.draft_gemv != 7 && o.draft_gemv != 9)
    throw usage_error("--draft-gemv: must be 0 (the default), 2, 3, 4, 7 or 9, got " + std::to_string(o.draft_gemv));
  if (packed_order != "cpu" && packed_order != "lane")
    throw usage_error("--packed-order: must be cpu or lane, got '" + packed_order + "'");
  o.packed_lane_order = packed_order == "lane";
  if (o.packed_stages != 0 && (o.packed_stages < 2 || o.packed_stages > 4))
    throw usage_error("--packed-stages: must be 0 (per format), 2, 3 or 4, got " + std::to_string(o.packed_stages));
  if (o.packed_blocks != 0 && o.packed_blocks != 3 && o.packed_blocks != 4)
    throw usage_error("--packed-blocks: must be 0 (the default), 3 or 4, got " + std::to_string(o.packed_blocks));
  // Decoding runs: --kv picks the full-cache decode, QuantSpec (CPU) and the
  // GPU's quantized caches.
  bool run_full = true, run_quantspec = false;
  std::string cache_kinds;
  for (const auto& item : parse_eval_modes(kv_kinds, 0)) {
    if (item.name == "quantspec") {
      run_quantspec = true;
      continue;
    }
    cache_kinds += (cache_kinds.empty() ? "" : ",") + item.label();
  }
  const auto modes = cache_kinds.empty() ? std::vector<kv_mode>{}
                                         : parse_bench_modes(cache_kinds, kv_bits, kv_group, kv_residual, topk);
  if (vm.count("actors")) {
    if (!vm.count("model")) throw usage_error("--actors: needs --model (real weights on the host)");
    if (device != "cpu" && device != "cuda") throw usage_error("--device: '" + device + "' is not one of cpu, cuda");
    return actor_report(o, device);
  }
  if (vm.count("memory-only")) {
    if (run_quantspec) throw usage_error("--memory-only: quantspec's cache is hier (list hier instead)");
    return memory_report(o, modes, json_path);
  }
  if (!vm["kv"].defaulted()) {
    run_full = false;
    for (const auto& m : modes) run_full = run_full || m.format == kv_format::full;
    for (const auto& m : modes)
      if (device == "cuda") check_gpu_topk(m);
    o.kv_modes = modes;
  }
  if (!run_quantspec && (!vm["gamma"].defaulted() || !vm["weight-group"].defaulted() || qso.quantize_lm_head ||
                         !vm["tokens"].defaulted() || !vm["acceptance"].defaulted()))
    throw usage_error("--gamma, --weight-group, --draft-lm-head, --tokens and --acceptance apply to --kv quantspec");
  if (!(qso.assume_acceptance >= 0 && qso.assume_acceptance < 1))
    throw usage_error("--acceptance: must be in [0, 1), got " + std::to_string(qso.assume_acceptance));
  qso.group = kv_group;
  if (device == "cuda") {
#ifndef SPECPIPE_HAVE_CUDA
    throw usage_error("--device cuda: this build has no CUDA backend (configure with -DSPECPIPE_CUDA=ON)");
#else
    if (!cuda_available()) throw usage_error("--device cuda: no CUDA device is visible");
#endif
  } else if (o.kernels && (o.gather_only || o.gemv_only)) {
    throw usage_error("--gather-only and --gemv-only time CUDA kernels; they need --device cuda");
  } else if (o.kernels && !vm["kv"].defaulted()) {
    throw usage_error("--device cpu --kernels times every cache format; it takes no --kv");
  }
  bench_report r;
  if (device == "cuda") {
    // With quantspec, its own `ar` rows are the full-cache decode.
    bool other_modes = false;
    for (const auto& m : o.kv_modes) other_modes = other_modes || m.format != kv_format::full;
    if (!run_quantspec || other_modes) r = run_cuda_bench(o);
    if (run_quantspec) {
      bench_report q = run_cuda_quantspec_bench(o, qso);
      if (r.device_name.empty()) {
        r.device_name = q.device_name;
        r.copy_bandwidth = q.copy_bandwidth;
      }
      r.notes.insert(r.notes.end(), q.notes.begin(), q.notes.end());
      r.points.insert(r.points.end(), q.points.begin(), q.points.end());
    }
  } else if (o.kernels) {
    r = run_cpu_kernel_bench(o, 0);
  } else {
    bool cache_modes = false;
    for (const auto& m : o.kv_modes) cache_modes = cache_modes || m.format != kv_format::full;
    if (cache_modes)
      r = run_cache_bench(o, o.kv_modes);
    else if (run_full)
      r = run_cpu_bench(o);
    if (run_quantspec) {
      bench_report q = run_quantspec_bench(o, qso);
      r.device_name = q.device_name;
      r.notes.insert(r.notes.end(), q.notes.begin(), q.notes.end());
      r.points.insert(r.points.end(), q.points.begin(), q.points.end());
    }
  }
  print_table(o, r);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    if (!out) throw std::runtime_error("--json: cannot write '" + json_path + "'");
    out << boost::json::serialize(report_json(o, r)) << "\n";
    out.close();
    if (!out) throw std::runtime_error("--json: error writing '" + json_path + "' (disk full?)");
  }
  return 0;
}

}  // namespace

void load_cpu_bench_model(const bench_options& o, cpu_bench_model& m) {
  const auto& c = o.config;
  if (!o.model_dir.empty()) {
    m.loaded.emplace(model::load(o.model_dir));
    m.weights = m.loaded->weights;
    return;
  }
  const std::size_t params = std::size_t(c.vocab_size * c.hidden_size) * 2 +
                             std::size_t(c.num_hidden_layers) *
                                 std::size_t((c.q_dim() + 2 * c.kv_dim()) * c.hidden_size + c.hidden_size * c.q_dim() +
                                             3 * c.intermediate_size * c.hidden_size);
  if (params > (std::size_t(1) << 30))
    throw usage_error("--device cpu: random weights for '" + o.model_name + "' need " +
                      std::to_string(params * 4 >> 30) + " GiB of host memory; use --preset tiny or --model DIR");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-0.035f, 0.035f), g(0.9f, 1.1f);
  auto& store = m.store;
  auto make = [&](std::int64_t rows, std::int64_t cols, bool norm) {
    store.emplace_back(std::size_t(rows * cols));
    for (auto& x : store.back()) x = norm ? g(rng) : u(rng);
    // Norm gains are vectors, as in a checkpoint.
    if (norm) return tensor_view(store.back().data(), dtype::f32, {cols});
    return tensor_view(store.back().data(), dtype::f32, {rows, cols});
  };
  store.reserve(3 + 9 * std::size_t(c.num_hidden_layers));
  model_weights& w = m.weights;
  w.embed = make(c.vocab_size, c.hidden_size, false);
  w.final_norm = make(1, c.hidden_size, true);
  w.lm_head = make(c.vocab_size, c.hidden_size, false);
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l)
    w.layers.push_back({make(1, c.hidden_size, true), make(c.q_dim(), c.hidden_size, false),
                        make(c.kv_dim(), c.hidden_size, false), make(c.kv_dim(), c.hidden_size, false),
                        make(c.hidden_size, c.q_dim(), false), make(1, c.hidden_size, true),
                        make(c.intermediate_size, c.hidden_size, false),
                        make(c.intermediate_size, c.hidden_size, false),
                        make(c.hidden_size, c.intermediate_size, false)});
}

bench_report run_cpu_bench(const bench_options& o) {
  using clock = std::chrono::steady_clock;
  bench_report r;
  r.device_name = "CPU backend";
  const auto& c = o.config;
  cpu_bench_model bm;
  load_cpu_bench_model(o, bm);
  const model_weights& w = bm.weights;
  cpu_forward fwd(c, w);
  std::vector<float> logits(std::size_t(c.vocab_size));
  std::mt19937 rng(2);
  auto tokens = [&](std::size_t n) {
    std::vector<std::int32_t> t(n);
    for (auto& x : t) x = std::int32_t(rng() % std::uint32_t(c.vocab_size));
    return t;
  };
  r.notes.push_back("CPU backend: the KV cache is filled by a real prefill of the context; batches run one "
                    "sequence after another");
  for (const long long ctx : o.contexts) {
    auto cache = make_full_cache(c, ctx + o.warmup + o.repeats + 1, &fwd.pool());
    const auto prompt = tokens(std::size_t(ctx));
    const auto t0 = clock::now();
    fwd.forward(prompt, *cache, logits);
    const double pre = std::chrono::duration<double>(clock::now() - t0).count();
    r.points.push_back({"prefill", 1, ctx, false, "", pre * 1e3, 0, double(ctx) / pre});
    for (const long long b : o.batches) {
      if (b != 1) {
        r.points.push_back({"decode", b, ctx, true, "the CPU benchmark decodes batch 1 only"});
        continue;
      }
      std::vector<double> ms;
      for (int i = 0; i < o.warmup + o.repeats; ++i) {
        const std::int32_t one[1] = {std::int32_t(i % c.vocab_size)};
        const auto s = clock::now();
        fwd.forward(one, *cache, logits);
        if (i >= o.warmup) ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - s).count());
      }
      const double med = median(ms);
      r.points.push_back({"decode", b, ctx, false, "", med, *std::max_element(ms.begin(), ms.end()) -
                                                                *std::min_element(ms.begin(), ms.end()),
                          1e3 / med});
    }
  }
  return r;
}

boost::json::value report_json(const bench_options& o, const bench_report& r) {
  boost::json::object root;
  root["model"] = o.model_name;
  root["device"] = o.device;
  root["device_name"] = r.device_name;
  root["copy_bandwidth_GBps"] = r.copy_bandwidth / 1e9;
  root["repeats"] = o.repeats;
  root["warmup"] = o.warmup;
  root["cuda_graphs"] = o.graphs;
  root["pdl"] = o.overlap;
  if (o.fuse_swiglu) root["fuse_swiglu"] = *o.fuse_swiglu;
  if (o.fuse_norm) root["fuse_norm"] = *o.fuse_norm;
  if (o.fuse_rope) root["fuse_rope"] = *o.fuse_rope;
  if (o.k_split) root["gemv_k_split"] = *o.k_split;
  if (o.gemv_unroll) root["gemv_unroll"] = *o.gemv_unroll;
  if (!o.kv_modes.empty()) {
    boost::json::array modes;
    for (const auto& m : o.kv_modes) modes.emplace_back(m.format == kv_format::full ? std::string("full") : m.describe());
    root["kv_modes"] = std::move(modes);
    root["packed_stages"] = o.packed_stages;
    root["packed_blocks"] = o.packed_blocks;
    root["packed_order"] = o.packed_lane_order ? "lane" : "cpu";
    root["draft_gemv"] = o.draft_gemv;
  }
  boost::json::array notes;
  for (const auto& n : r.notes) notes.emplace_back(n);
  root["notes"] = std::move(notes);
  boost::json::array pts;
  for (const auto& p : r.points) {
    boost::json::object j;
    j["kind"] = p.kind;
    j["batch"] = p.batch;
    j["context"] = p.context;
    j["skipped"] = p.skipped;
    j["note"] = p.note;
    if (!p.skipped) {
      j["median_ms"] = p.ms;
      j["spread_ms"] = p.ms_spread;
      j["tokens_per_s"] = p.tokens_per_s;
      j["bytes"] = p.bytes;
      j["roofline_ms"] = p.roofline_ms;
      j["roofline_fraction"] = p.roofline_ms > 0 ? p.roofline_ms / p.ms : 0.0;
      j["peak_gib"] = p.peak_gib;
      for (const auto& [k, v] : p.extra) j[k] = v;
    }
    pts.emplace_back(std::move(j));
  }
  root["points"] = std::move(pts);
  return root;
}

int run_bench(int argc, char** argv) { return guarded("bench", bench_main, argc, argv); }

}  // namespace specpipe::apps
