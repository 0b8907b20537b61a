#pragma once
// What a worker runs: the compute of one device behind a small interface, so
// the worker actor stays a shell. The CPU backend implements it over
// cpu_forward and the full cache (actors/cpu_step_compute.hpp); tests use
// doubles with the same interface. Called only from the worker's own thread.
#include <cstdint>

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

class step_compute {
 public:
  virtual ~step_compute() = default;
  virtual compute_shape shape() const = 0;
  // Runs one sequence's entry (creating its cache at the first prefill):
  // fills out.logits (the last token's), out.rows (its new K|V rows, f16),
  // out.cache_length, and for speculative cache modes out.scores/out.needed.
  // entry.fetched, when set, has completed. Throws on failure.
  virtual void run(const step_entry& entry, step_output& out) = 0;
  // Drops a sequence's cache (no-op for unknown sequences).
  virtual void release(seq_id seq) = 0;
  virtual std::int64_t sequences() const = 0;
  virtual std::int64_t cache_bytes() const = 0;
};

}  // namespace specpipe
