#pragma once
// SpeCache's cache on the compute device (DESIGN.md; SpeCache, ICML 2025,
// sec. 3): a low-bit KIVI copy of the whole KV cache (1 bit with the levels at
// the quartiles, or KIVI 2-bit) plus the full-precision window of the newest
// tokens. Attention reads, per layer and KV head, a set of positions from
// 16-bit rows fetched from the host store instead of from the codes (mixed
// attention). The 16-bit cache itself lives elsewhere (the host store): this
// cache asks a specache_link for the rows and hands it the probabilities the
// top-k sets come from, so the synchronous evaluation path and the actor
// pipeline share all of the method's arithmetic.
//
// The driver announces each forward with begin():
//   prefill      the prompt; like KIVI it is attended in full precision (the
//                fresh rows sit in the window) and quantized on later appends.
//   predecode    one row: the first generated token over the low-bit cache.
//                Its probabilities pick the first top-k set; commit() drops
//                its row again (it returns as the real token of the next step).
//   speculative  two rows, the real token T_t at p and the speculative token
//                T'_{t+1} at p + 1. Both attend to the low-bit cache with the
//                fetched rows substituted, plus the step's fresh rows, causally
//                (the speculative row sees T_t, not the reverse). The
//                speculative row's probabilities go to the link; commit() keeps
//                only T_t.
//   output       one row, the paper's non-speculative ablation: its attention
//                over the low-bit cache picks the top-k now, the link fetches
//                them (the step waits), and attention is recomputed with them.
//
// Candidates: a top-k is chosen among positions that are (or, for the next
// step, will be) in the packed part; the window is full precision anyway and
// fetching its rows would waste the k slots on rows already exact.
#include <cstdint>
#include <memory>
#include <vector>

#include "model/cache_policy.hpp"
#include "model/config.hpp"
#include "model/kivi_cache.hpp"

namespace specpipe {

namespace kernels::cpu { class thread_pool; }

// One layer's substituted rows: per KV head up to `stride` positions,
// ascending, and their 16-bit rows, laid out as kernels::cpu::mixed_rows reads
// them (row r of head h at (h * stride + r) * head_dim).
struct specache_rows {
  std::int64_t stride = 0;
  std::vector<std::int64_t> positions;  // [n_kv_heads * stride]
  std::vector<std::int64_t> count;      // [n_kv_heads]
  std::vector<std::uint16_t> k, v;      // f16 [n_kv_heads * stride * head_dim]

  // Sizes the buffers for `heads` x `stride` rows of head_dim, counts zero.
  void reset(std::int64_t heads, std::int64_t stride, std::int64_t head_dim);
  std::int64_t rows() const;
};

// The attention probabilities of one query row of one layer over the
// positions a top-k may choose: probs[h * stride + j], h < n_heads,
// j < candidates.
struct specache_probs {
  int layer = 0;
  std::int64_t position = 0;    // the query's own position
  std::int64_t candidates = 0;  // eligible positions 0 .. candidates - 1
  std::int64_t stride = 0;
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;
  const float* probs = nullptr;
};

// Whoever owns the 16-bit rows: the synchronous session (model/) or the
// actor pipeline's worker (actors/).
class specache_link {
 public:
  virtual ~specache_link() = default;
  // The rows the real query of `layer` reads in place of codes this step, or
  // null for none. May block until a transfer completes.
  virtual const specache_rows* rows(int layer) = 0;
  // The speculative query's probabilities: the next step's top-k set.
  virtual void speculative(const specache_probs& p) = 0;
  // Output prefetch: the real query's probabilities over the low-bit cache;
  // returns the top-k rows, fetched before it returns.
  virtual const specache_rows* fetch_now(const specache_probs& p) = 0;
  // The real query's probabilities over the exact 16-bit keys (hit
  // statistics); called only when the cache tracks exact keys.
  virtual void exact(const specache_probs& p) = 0;
};

enum class specache_step : std::uint8_t { prefill, predecode, speculative, output };

struct specache_options {
  int bits = 1;                // 1: SpeCache's quartile levels; 2: KIVI 2-bit
  std::int64_t group = 64;     // G
  std::int64_t residual = 64;  // R
  // Keep f16-rounded keys beside the low-bit copy so the real query's exact
  // top-k can be scored against what was fetched. A measurement aid: its
  // memory is reported apart (exact_bytes) and is not the method's.
  bool track_exact = true;
};

class specache_cache final : public cache_policy {
 public:
  // Room for max_tokens committed tokens (plus the speculative row).
  // Throws std::invalid_argument naming a bad option.
  specache_cache(const model_config& config, std::int64_t max_tokens, const specache_options& opts,
                 kernels::cpu::thread_pool* pool = nullptr);
  ~specache_cache() override;

  // The link consulted by attend(); must be set before a non-prefill step.
  void set_link(specache_link* link) { link_ = link; }
  // Announces the next forward.
  void begin(specache_step step);
  // Ends a forward: drops the row that is not kept (predecode, speculative).
  void commit();

  std::int64_t length(int layer) const override;
  void append(int layer, const float* k, const float* v, std::int64_t n) override;
  void attend(int layer, const float* q, std::int64_t n, std::int64_t pos0, float* out) override;
  void truncate(std::int64_t n) override;
  // The low-bit copy and its window: what the method keeps on the device.
  std::size_t bytes_used() const override;

  // The rows the last forward appended, [fresh_count, n_kv_heads, head_dim]
  // f32 per layer; after commit() the first fresh_kept() are the kept ones.
  const float* fresh_keys(int layer) const;
  const float* fresh_values(int layer) const;
  std::int64_t fresh_kept() const { return fresh_kept_; }

  // Positions the packed part will hold when the next step attends: the
  // candidates of a speculative top-k.
  std::int64_t next_quantized(int layer) const;
  const kivi_cache& low_bit() const { return *low_; }
  const specache_options& options() const { return opts_; }
  specache_step step() const { return step_; }
  // Bytes of the exact-key shadow (0 without track_exact).
  std::size_t exact_bytes() const;

 private:
  struct impl;
  void exact_probs(int layer, const float* q, std::int64_t pos);

  model_config config_;
  specache_options opts_;
  kernels::cpu::thread_pool* pool_;
  std::unique_ptr<kivi_cache> low_;
  specache_link* link_ = nullptr;
  specache_step step_ = specache_step::prefill;
  std::int64_t fresh_kept_ = 0;
  std::unique_ptr<impl> impl_;
};

}  // namespace specpipe
