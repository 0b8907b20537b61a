#pragma once
// What a worker runs: the compute of one device behind a small interface, so
// the worker actor stays a shell. The CPU backend implements it over
// cpu_forward and the full cache (actors/cpu_step_compute.hpp); tests use
// doubles with the same interface. Called only from the worker's own thread.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "actors/messages.hpp"

namespace specpipe {

struct compute_shape {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  std::int64_t vocab = 0;
  // The cache mode reads rows the planner prefetches from the speculative
  // scores of the step before: such steps cannot be queued ahead.
  bool speculative = false;
  // A step may return several tokens (step_output::tokens): such steps
  // cannot be queued ahead either, as the next one starts after the last.
  bool multi_token = false;
};

// How a compute that speculates reaches the planner from inside run(); the
// worker fills it in (attach()). Called on the worker's thread only.
struct speculation_link {
  // Sends one layer's speculative scores: the planner gathers that layer's
  // rows for the sequence's next step while the compute goes on.
  std::function<void(std::shared_ptr<const spec_scores>)> prefetch;
  // Plans and gathers rows now and returns the ticket; the caller then waits
  // on its event (the output-prefetch ablation: the transfer is on the
  // critical path). Throws std::runtime_error when the planner fails.
  std::function<std::shared_ptr<const fetched_rows>(std::shared_ptr<const spec_scores>)> fetch_now;
  // A layer's rows were waited for from t0 to t1 (trace clock) and read.
  std::function<void(const fetched_rows&, double t0_us, double t1_us)> consumed;
};

// Throws std::runtime_error unless `entry` continues a cache of
// `cache_length` tokens and its tokens fit `max_context`: what every compute
// checks before it runs an entry.
void check_step_entry(const step_entry& entry, std::int64_t cache_length, std::int64_t max_context);

class step_compute {
 public:
  virtual ~step_compute() = default;
  virtual compute_shape shape() const = 0;
  // Runs one sequence's entry (creating its cache at the first prefill):
  // fills out.logits (the last token's), out.rows (its new K|V rows, f16),
  // out.cache_length, and for speculative cache modes out.scores/out.needed.
  // The compute waits on each of entry.fetched's events before it reads
  // those rows. Throws on failure.
  virtual void run(const step_entry& entry, step_output& out) = 0;
  // Runs one step's entries: outs[i] belongs to entries[i], and an entry
  // whose outs[i].error is already set (the worker found it cannot run) is
  // skipped. An entry that fails gets its error in outs[i].error; the others
  // go on. Each output's compute_start_us / compute_end_us say when its
  // work ran (entries batched into one forward share them) and compute_us
  // its share of the time. The default runs run()
  // entry by entry; a device backend batches the decode entries into one
  // forward. Called on the worker's thread only.
  virtual void run_batch(std::span<const step_entry> entries, std::span<step_output> outs);
  // The worker picked `token` from run()'s logits. SpeCache pre-decodes
  // after a prefill here (it needs the first token). Throws on failure.
  virtual void picked(const step_entry&, std::int32_t /*token*/, step_output&) {}
  // Gives a speculating compute its way to the planner (once, at start).
  virtual void attach(speculation_link) {}
  // Prefix of the worker's trace track ("cuda " for a GPU: "cuda worker 0").
  virtual const char* track_prefix() const { return ""; }
  // Drops a sequence's cache (no-op for unknown sequences).
  virtual void release(seq_id seq) = 0;
  virtual std::int64_t sequences() const = 0;
  virtual std::int64_t cache_bytes() const = 0;
};

}  // namespace specpipe
