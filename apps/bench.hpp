#pragma once
// `specpipe bench`: shared pieces of the flag parser (bench.cpp) and the
// CUDA measurements (bench_cuda.cpp).
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "model/config.hpp"
#include "model/kv_mode.hpp"
#include "model/model.hpp"
#include "model/weights.hpp"

namespace specpipe::apps {

// v with `decimals` digits after the point, for the benchmarks' notes.
inline std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

struct bench_options {
  std::string model_name;           // preset name or model directory
  std::string model_dir;            // empty: preset with random weights
  model_config config;
  std::string device = "cuda";
  std::vector<long long> batches{1};
  std::vector<long long> contexts{4096};
  std::int64_t prefill_tokens = 2048;
  int repeats = 20;
  int warmup = 5;
  bool kernels = false;
  bool gather_only = false;  // with kernels: only the gather benchmarks
  bool gemv_only = false;    // with kernels: only the 4-bit (draft) GEMV versions
  bool attention_only = false;  // with kernels: only decode attention and quantize-on-append
  bool graphs = true;
  bool overlap = true;  // GEMVs as programmatic dependent launches (cuda_forward_options)
  // The GEMV v2 switches of cuda_forward_options; unset: its defaults.
  std::optional<bool> fuse_swiglu, k_split, fuse_norm, fuse_rope;
  std::optional<int> gemv_unroll;
  // CUDA decode: the KV cache modes to time at each context and batch
  // (--kv full,kivi:1,specache,hier:4 ...); empty: full only.
  std::vector<kv_mode> kv_modes;
  int packed_stages = 0;  // cp.async stages of the packed attention; 0: per format
  int packed_blocks = 0;  // the lane-order attention's register budget in blocks per SM (3 or 4); 0: default
  bool packed_lane_order = true;  // quantized caches in lane order, read by packed attention v4 (false: v3)
  int draft_gemv = 0;     // QuantSpec's 4-bit GEMV version on the GPU (kernels/cuda/int4_gemv.hpp); 0: default
  // CUDA decode: a cap on what the run may allocate on the GPU (weights,
  // caches, scratch), to emulate a smaller card; 0: the whole device.
  double gpu_memory_gib = 0;
  // CUDA decode, specache: pinned host bytes for the 16-bit store (GiB).
  double host_memory_gib = 32;
  // CUDA decode, specache: a slot's real and speculative rows in one
  // multi-query attention block or one each: "auto", "per-row" or "shared"
  // (cuda_forward_options::specache_blocks).
  std::string specache_blocks = "auto";
  // CUDA decode: instead of --batch, the largest batch of each mode that fits
  // the budget, and the throughput there.
  bool max_batch = false;
  // CPU cache bench: added before every gather, to emulate a slower link.
  long long transfer_latency_us = 0;
};

// One measured (or skipped) configuration.
struct bench_point {
  std::string kind;  // "prefill", "decode", "attention", "gemv"
  long long batch = 0, context = 0;
  bool skipped = false;
  std::string note;
  double ms = 0;           // median
  double ms_spread = 0;    // max - min of the repeats
  double tokens_per_s = 0;
  double bytes = 0;        // bytes the step must read (roofline numerator)
  double roofline_ms = 0;  // bytes / measured copy bandwidth
  double peak_gib = 0;
  std::vector<std::pair<std::string, double>> extra;  // further figures, written to the JSON as they are
};

struct bench_report {
  std::string device_name;
  double copy_bandwidth = 0;  // bytes/s, read + write
  std::vector<bench_point> points;
  std::vector<std::string> notes;
};

// The weights the CPU benchmarks run: the checkpoint's (--model) or random
// ones of the preset's shape, held in `store`. Filled in place: the views
// point into it.
struct cpu_bench_model {
  std::optional<model> loaded;
  std::vector<std::vector<float>> store;
  model_weights weights;
};
void load_cpu_bench_model(const bench_options& o, cpu_bench_model& m);

// QuantSpec on the CPU backend (bench_quantspec.cpp): per context, plain
// autoregressive target decoding over the hierarchical INT8 cache against
// QuantSpec rounds in the same run.
struct quantspec_bench_options {
  std::string gamma = "5";
  long long group = 0;         // G; 0: 128
  long long weight_group = 128;
  bool quantize_lm_head = false;
  long long tokens = 64;       // tokens decoded per measurement
  double assume_acceptance = 0;  // > 0: also report the speedup the measured costs give at this rate
};
bench_report run_quantspec_bench(const bench_options& o, const quantspec_bench_options& q);
// QuantSpec on the GPU (bench_quantspec_cuda.cpp): per context and batch,
// plain autoregressive decoding (bf16 weights and cache) against the draft
// step, the verify and measured rounds in the same run.
bench_report run_cuda_quantspec_bench(const bench_options& o, const quantspec_bench_options& q);

// Runs the CUDA benchmarks; throws usage_error when CUDA is unusable.
bench_report run_cuda_bench(const bench_options& o);
// The KV cache modes (full, kivi, specache: speculative or output prefetch)
// through the actor pipeline on the CPU backend (bench_caches.cpp).
bench_report run_cache_bench(const bench_options& o, const std::vector<kv_mode>& modes);
// `--device cpu --kernels` (bench_cpu_kernels.cpp): one layer's decode
// attention on the CPU backend, f32 against every packed cache format and
// SpeCache's mixed read, on `threads` threads (0: every core).
bench_report run_cpu_kernel_bench(const bench_options& o, int threads);
// Runs the CPU backend benchmarks (decode and prefill, no roofline).
bench_report run_cpu_bench(const bench_options& o);

boost::json::value report_json(const bench_options& o, const bench_report& r);

}  // namespace specpipe::apps
