#pragma once
// The Llama-family forward pass on the CUDA backend: bf16 weights and a KV
// cache resident on one GPU (bf16 rows, or the quantized formats of
// model/kv_mode.hpp), f32 math and an f32 residual stream. Plain C++ header (no CUDA types): in a build without CUDA
// every constructor throws std::runtime_error.
//
// cuda_model owns the weights (uploaded once from host views, f32/f16
// converted to bf16; or generated on the device for benchmarks). cuda_forward
// owns what one batch of sequences needs: a KV cache of fixed capacity per
// sequence slot and every scratch buffer, all sized at construction, so the
// decode loop allocates nothing. Decode steps are captured into one CUDA graph
// per batch size and replayed.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/int4_gemv.hpp"
#include "model/config.hpp"
#include "model/kv_mode.hpp"
#include "model/sampler.hpp"
#include "model/weights.hpp"

namespace specpipe {

class cuda_model {
 public:
  // Uploads `weights` (views of any of f32/f16/bf16) to device `device`.
  // Throws model_error-style std::invalid_argument naming the tensor when a
  // view is not contiguous or has an unsupported dtype.
  cuda_model(const model_config& config, const model_weights& weights, int device = 0);
  // Random weights generated on the device: uniform with standard deviation
  // `std_dev` for matrices, uniform in [0.9, 1.1] for the norm weights.
  static cuda_model random(const model_config& config, std::uint64_t seed, int device = 0,
                           float std_dev = 0.02f);
  ~cuda_model();
  cuda_model(cuda_model&&) noexcept;
  cuda_model& operator=(cuda_model&&) noexcept;

  const model_config& config() const;
  int device() const;
  // Device bytes of the weights for `config` (bf16 matrices, f32 norms).
  static std::size_t weight_bytes(const model_config& config);
  std::size_t weight_bytes() const { return weight_bytes(config()); }

  // QuantSpec's draft (model/draft_weights.hpp, on the device): 4-bit copies
  // of every projection, quantized on the GPU from the bf16 weights with the
  // format of kernels/int4_linear.hpp (group-wise asymmetric RTN), beside
  // them. Embedding and norms stay shared, and lm_head too unless `lm_head`
  // (--draft-lm-head): then the draft multiplies by a 4-bit copy of it in
  // the same format (the CPU draft's draft_options::quantize_lm_head). Once
  // per model; throws
  // std::invalid_argument when the group is not a positive multiple of 32 or
  // a projection's input size is not a multiple of 32 (the int4 GEMV's).
  // `layout` is the one the draft's GEMV version reads
  // (kernels::cuda::int4_gemv_layout): rows for 1-4, tiles for 7 and 9, repacked
  // on the device right after quantizing (kernels/int4_tiled.hpp); the
  // default follows the default version.
  void make_draft(std::int64_t group = 128,
                  kernels::cuda::int4_layout layout = kernels::cuda::int4_gemv_layout(
                      kernels::cuda::int4_gemv_default_version),
                  bool lm_head = false);
  bool has_draft() const;
  bool draft_lm_head() const;  // the draft has its own 4-bit lm_head
  kernels::cuda::int4_layout draft_layout() const;
  // Device bytes of the draft's copies (0 before make_draft); the same as
  // model/draft_weights.hpp's draft_bytes() for the shape (tiles: when every
  // projection's rows are a multiple of 16 and inputs of 128, as in Llama).
  std::size_t draft_bytes() const;

  struct impl;
  const impl& get() const { return *impl_; }

 private:
  cuda_model();
  std::unique_ptr<impl> impl_;
};

struct cuda_forward_options {
  int max_batch = 1;                 // sequence slots (and the largest decode batch)
  std::int64_t max_context = 4096;   // KV capacity per slot, in tokens
  std::int64_t prefill_chunk = 512;  // tokens per prefill forward
  int max_splits = 128;              // flash-decoding splits per sequence, at most
  bool use_graphs = true;            // replay decode steps as CUDA graphs
  // The GEMVs and the small kernels of the full-cache step (norms, RoPE,
  // SwiGLU, decode attention and its combine) as programmatic dependent
  // launches (sm_90 PDL): each launch overlaps the tail of the kernel before.
  bool overlap_launch = true;
  // The decode-path choices, each switchable so one run can time them
  // (kernels/cuda/NOTES.md, versions 3 and 4). fuse_swiglu: the SwiGLU as
  // the gate/up GEMV's epilogue (gemm_out::swiglu) instead of a kernel of
  // its own; where cuBLAS runs the projection (m > 2) the kernel stays. The
  // draft's 4-bit gate/up GEMV takes it too (v7, any m).
  bool fuse_swiglu = true;
  // The draft's qkv and gate/up 4-bit GEMVs (v7) form RMSNorm(x) themselves
  // (int4_gemv_args::norm, the same bits as the RMSNorm kernel), so a step
  // has two launches a layer fewer.
  bool fuse_norm = true;
  // The draft's qkv 4-bit GEMV (v7) applies RoPE and appends k and v to the
  // cache itself (int4_gemv_args::rope, the same bits as the RoPE kernel),
  // where make_draft stored the weight's q and k rows in pair order (tiles,
  // head_dim a multiple of 16): one launch a layer fewer. Opt-in: on the
  // H100 it measured 0-0.8% slower at batch 1, the RoPE launch being hidden
  // already (kernels/cuda/NOTES.md, "Stop 34"); not yet measured on the H200.
  bool fuse_rope = false;
  bool gemv_k_split = true;  // warps of a block share a row pair over slices of k
  // The draft's 4-bit GEMV (QuantSpec): int4_gemv_args::version. It must
  // read the layout the draft was made in (cuda_model::make_draft;
  // set_draft_weights(true) checks).
  int int4_gemv_version = kernels::cuda::int4_gemv_default_version;
  int gemv_unroll = kernels::cuda::gemv_default_unroll;  // loads per row in flight per lane: 2 or 4
  // Prefill attention on the tensor cores (cuBLAS, scores through a scratch
  // of at most prefill_scratch_bytes) instead of the CUDA-core flash kernel.
  bool prefill_attention_cublas = true;
  std::size_t prefill_scratch_bytes = std::size_t(256) << 20;
  kernels::cuda::gemm_impl gemm = kernels::cuda::gemm_impl::automatic;
  // The KV cache (model/kv_mode.hpp). full: bf16 rows per slot. kivi,
  // specache, hier: packed codes for max_context tokens per slot plus a bf16
  // window ring, the window and flush rules of model/quantized_cache.hpp,
  // quantized on the device as it fills, attention straight over the codes
  // (model/cuda_packed_kv.hpp). hier's read (INT4 or INT8) starts at kv.bits
  // and can be switched between forwards (set_kv_read).
  kv_mode kv;
  // Tokens one forward may append to the window directly (decode rows,
  // draft/verify chunks); at most G. Longer prefills attend through the
  // staging area of kv_staging_tokens positions (-1: max_context; 0: none,
  // then such prefills are refused).
  std::int64_t kv_max_append = 16;
  // Rows per slot that extend() may run (the logits and scratch hold
  // max_batch * max_step_tokens rows).
  std::int64_t max_step_tokens = 1;
  std::int64_t kv_staging_tokens = -1;
  // SpeCache's 16-bit rows (kv.format specache; model/cuda_specache.cpp):
  // every appended token's bf16 K/V also goes to a pinned, device-mapped host
  // store, and the specache_* steps fetch kv.topk of them per (layer, KV
  // head) into the attention. Off: the low-bit copy alone (as kivi).
  bool specache_fetch = false;
  // Host store rows per (slot, KV head); -1: max_context. Benchmarks that
  // cannot pin a store for every sequence's context alias positions modulo a
  // smaller one (the fetched bytes and their scatter are the same).
  std::int64_t specache_store_tokens = -1;
  // A slot's real and speculative rows: one attention block each, or both
  // in one multi-query block (codes loaded once for both). automatic: shared
  // over a lane-order cache (packed attention v4, whose MMAs have 8 query
  // columns and use GQA-group of them per row: the second row fills the
  // idle ones; llama3-8b 32k on the H200, batch 8: 12.3 ms a step against
  // 15.6, batch 79: 77 against 112), one per row over the cpu order (v3,
  // where the 8-column block measured slower at 1-2 bits).
  // kernels/cuda/NOTES.md, "SpeCache on the GPU".
  enum class specache_block_choice { automatic, per_row, shared };
  specache_block_choice specache_blocks = specache_block_choice::automatic;
  // Measure the top-k hit rate: each real row also writes its scores, and
  // per layer its own top-k (from this step's attention, fetched rows exact,
  // the rest low-bit) is counted against the rows fetched for it
  // (specache_hits). Costs a second top-k per layer and twice the scores.
  bool specache_hit_rate = false;
  // Time each layer of a SpeCache step on the compute stream and its top-k
  // and fetch on the planner and transfer streams with CUDA events, for the
  // trace (specache_timeline). Such steps run eagerly, not as graphs.
  bool specache_timeline = false;
  int packed_stages = 0;  // cp.async stages of the packed attention: 2, 3 or 4; 0: per format
  // The lane-order attention's register budget (packed_attention_args::
  // v4_blocks): 0 or 3 (168 registers a thread), 4 (128, a third more warps
  // per SM for the 1-4-bit reads).
  int packed_blocks = 0;
  // Keep the quantized caches (head_dim 128, G >= 32) in lane order
  // (kernels/cuda/packed_lane_order.hpp), read by the packed attention v4
  // (faster than v3 in every mode measured, kernels/cuda/NOTES.md); other
  // shapes, and false, keep the cpu order (v3).
  bool packed_lane_order = true;
};

class cuda_forward {
 public:
  // `model` must outlive this object.
  cuda_forward(const cuda_model& model, const cuda_forward_options& options);
  ~cuda_forward();
  cuda_forward(const cuda_forward&) = delete;
  cuda_forward& operator=(const cuda_forward&) = delete;

  const model_config& config() const;
  const cuda_forward_options& options() const;

  std::int64_t length(int slot) const;
  // Packed (quantized) tokens of `slot`; 0 in the full mode.
  std::int64_t quantized(int slot) const;
  // Drops every token at position >= n of `slot` (0 empties it). With a
  // quantized cache only window tokens can be dropped (n >= quantized(slot),
  // or n == 0): std::invalid_argument otherwise, as the CPU cache.
  void truncate(int slot, std::int64_t n);
  // hier: read 4 (INT4, upper plane: QuantSpec's draft) or 8 (INT8: the
  // target) bits from the next forward on. Other modes accept only their own
  // bits. Each read has its own decode graphs.
  void set_kv_read(int bits);
  int kv_read() const;
  // Multiply by the draft's 4-bit projections (true) or the 16-bit ones from
  // the next forward on. std::logic_error when the model has no draft, or
  // when its layout is not the one options' int4_gemv_version reads.
  void set_draft_weights(bool draft);
  bool draft_weights() const;

  // Runs `tokens` for `slot` at positions length(slot) .. +n-1 in chunks of
  // prefill_chunk, appending their K/V. The last token's logits stay on the
  // device (for select()) and are copied to `logits` ([vocab]) when non-empty.
  void prefill(int slot, std::span<const std::int32_t> tokens, std::span<float> logits = {});

  // One decode step: tokens[i] for slots[i] (distinct slots, each at its own
  // length). Logits [batch, vocab] stay on the device and are copied to
  // `logits` when non-empty. Returns once the work is queued when `logits` is
  // empty (the caller may time it with events on stream()).
  void decode(std::span<const int> slots, std::span<const std::int32_t> tokens,
              std::span<float> logits = {});

  // `n` tokens per slot (tokens[i * n + j] for slots[i], distinct) at
  // positions length(slot) .. + n - 1, appended, with the logits of every
  // row ([batch * n, vocab], row i * n + j) kept on the device and copied to
  // `logits` when non-empty: QuantSpec's verify of gamma + 1 tokens. With a
  // quantized cache, the n rows of a slot share each load of its codes in
  // the attention (packed_attention_args::block_first). n at most
  // max_step_tokens (and kv_max_append when quantized). Captured as a CUDA
  // graph per (batch, n, read, weights), as decode().
  void extend(std::span<const int> slots, std::int64_t n, std::span<const std::int32_t> tokens,
              std::span<float> logits = {});

  // SpeCache (specache_fetch; DESIGN.md, SpeCache): the decode steps of the
  // method, batched over distinct slots each at its own length.
  //
  // specache_predecode: the first generated token of each slot, one row over
  // the low-bit cache alone; its attention picks (per layer and KV head) the
  // rows the slot's next specache_step reads, and they are fetched before the
  // call's work ends. The row is not kept: the token returns as that step's
  // real token. Logits [batch, vocab] (the first speculative token).
  void specache_predecode(std::span<const int> slots, std::span<const std::int32_t> tokens,
                          std::span<float> logits = {});
  // One step: the real token tokens[i] at length(slot) and the speculative
  // token spec[i] at + 1 for slots[i], both over the low-bit cache with the
  // slot's fetched rows substituted (the speculative row also sees the real
  // one). Per layer, the speculative rows' attention picks the next step's
  // rows; a planner stream ranks them and a transfer stream fetches them from
  // the host store while the later layers compute. Only the real rows are
  // kept (device window and host store). Logits [batch, 2, vocab]: row 2i
  // is slot i's real row, 2i + 1 its speculative row. std::logic_error for a
  // slot that no predecode has seeded since it was emptied.
  void specache_step(std::span<const int> slots, std::span<const std::int32_t> tokens,
                     std::span<const std::int32_t> spec, std::span<float> logits = {});
  // The paper's non-speculative ablation (--prefetch output): one row per
  // slot whose low-bit attention picks the rows now; the step fetches them
  // (waiting for the link) and attends again with them. Logits [batch, vocab].
  void specache_output_step(std::span<const int> slots, std::span<const std::int32_t> tokens,
                            std::span<float> logits = {});
  // Benchmarks: with `on` false the speculative steps skip the planner and
  // the transfer (each reads the rows fetched before), so the bench can time
  // a step without its fetch; specache_plan_and_fetch then runs the skipped
  // work alone on stream() (every layer's top-k over the last step's scores
  // and its fetch), to say how much of it a normal step hides.
  void specache_set_fetch(bool on);
  void specache_plan_and_fetch();
  // Turns the timeline on or off for the next steps (as the option does at
  // construction): benchmarks time one eager step with it after the graphs.
  void specache_set_timeline(bool on);
  // With specache_timeline: the last SpeCache step's GPU spans, in ms from
  // the step's start on the device (waits for the step).
  struct gpu_span {
    int stream = 0;  // 0 compute, 1 planner, 2 transfer
    int layer = 0;
    const char* name = "";  // "layer", "wait rows" (output prefetch, inside a layer), "top-k", "fetch"
    double start_ms = 0, end_ms = 0;
  };
  std::vector<gpu_span> specache_timeline() const;
  // With specache_hit_rate: {positions the real rows' top-k needed, of
  // those already fetched}, summed over steps, layers and KV heads.
  std::pair<std::int64_t, std::int64_t> specache_hits() const;
  // Pinned host bytes of the store (0 without specache_fetch).
  std::size_t specache_host_bytes() const;
  static std::size_t specache_host_bytes(const model_config& config, const cuda_forward_options& options);
  // Device bytes of SpeCache's fetch (fetched rows and positions, the
  // planner's scores, top-k and scratch); part of device_bytes().
  static std::size_t specache_device_bytes(const model_config& config, const cuda_forward_options& options);
  // 16-bit rows fetched so far (every layer and KV head; 2 * head_dim * 2
  // bytes each), counted from the top-k sizes the steps asked for.
  std::int64_t specache_rows_fetched() const;
  // What the options resolved to for this model: the packed cache in lane
  // order (packed attention v4), and SpeCache's two rows of a slot in one
  // attention block (specache_blocks).
  bool packed_lane_order() const;
  bool specache_shared_blocks() const;

  // Picks one token per row of the last forward's logits on the device (one
  // row after prefill, `batch` rows after decode, batch * n after extend):
  // argmax at temperature 0, else kernels::cuda::sample_rows with draw
  // counter `counter`. first_row / rows (-1: to the end) pick a range of
  // those rows, e.g. a SpeCache step's real rows or its speculative ones.
  void select(const sampling_params& params, std::uint64_t counter, std::span<std::int32_t> out,
              std::int64_t first_row = 0, std::int64_t rows = -1);

  // Benchmarks: fills the first `length` positions of `slot` in every layer
  // with uniform bf16 values in [-1, 1] instead of running a prefill.
  void fill_random_kv(int slot, std::int64_t length, std::uint64_t seed);

  void synchronize() const;
  // Makes this forward's device the calling thread's current one. A thread
  // other than the constructing one (an actor's) calls it before its first
  // call, as the current device is per thread.
  void bind_thread() const;
  void* stream() const;  // the cudaStream_t all work runs on

  // Device bytes this object allocates for `config` and `options` (KV cache
  // plus scratch), so callers can skip configurations that do not fit.
  static std::size_t device_bytes(const model_config& config, const cuda_forward_options& options);
  // Device bytes of the KV cache alone for these options: bf16 rows (full),
  // or packed runs + window rings + the prefill staging area.
  static std::size_t kv_device_bytes(const model_config& config, const cuda_forward_options& options);
  // KV bytes one token occupies over all layers (K and V, bf16).
  static std::size_t kv_bytes_per_token(const model_config& config);
  // The same for a cache mode: bf16 for full, else the packed codes, scales
  // and zeros per token (memory/kv_layout.hpp; windows not included).
  static double kv_bytes_per_token(const model_config& config, const kv_mode& mode);
  // What a decode step reads per packed token: the same, except that hier's
  // INT4 read (bits 4) skips the lower planes (the roofline of the draft).
  static double kv_read_bytes_per_token(const model_config& config, const kv_mode& mode);

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace specpipe
