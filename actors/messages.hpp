#pragma once
// The data the pipeline's actors exchange. Plain structs, no CAF: the CUDA
// side (actors/cuda/) includes this too. Type IDs and inspect overloads live
// in actors/type_ids.hpp. Types holding shared pointers into host or device
// memory are local-only and never cross the network.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "actors/batch_former.hpp"
#include "actors/ids.hpp"
#include "actors/topk_planner.hpp"
#include "actors/transfer_event.hpp"
#include "memory/allocator.hpp"
#include "model/sampler.hpp"
#include "actors/trace_event.hpp"
#include "model/spec_stats.hpp"
#include "model/specache_stats.hpp"

namespace specpipe {

// ---- host KV store --------------------------------------------------------

// New K/V rows of one sequence: [n_tokens][n_layers][n_kv_heads][row_bytes],
// a row being K then V of one token for one (layer, KV head), f16.
struct kv_rows {
  seq_id seq = 0;
  std::int64_t pos0 = 0;
  std::int64_t n_tokens = 0;
  int n_layers = 0;
  int n_kv_heads = 0;
  std::size_t row_bytes = 0;
  std::vector<std::byte> data;
};

struct kv_append {
  std::shared_ptr<const kv_rows> rows;
};

struct kv_usage {
  std::int64_t bytes_used = 0;
  std::int64_t bytes_budget = 0;
  std::int64_t blocks_used = 0;
  std::int64_t blocks_total = 0;
  std::int64_t sequences = 0;
  std::int64_t tokens = 0;
  std::int64_t leases = 0;  // gathers still reading the store
  std::int64_t blocks_reserved = 0;  // held for reservations, no token in them yet
};

// Where a gather reads: rows of the store's arena, resolved by the store.
// `selections` says which (layer, head, position) each row is, in order.
// The sequence's blocks stay allocated until the lease is returned.
struct gather_source {
  seq_id seq = 0;
  const std::byte* base = nullptr;
  std::size_t row_bytes = 0;
  std::vector<std::int64_t> rows;
  std::vector<topk_selection> selections;
  std::uint64_t lease = 0;
  std::shared_ptr<const void> keep_alive;  // the arena outlives the gather
};

// ---- transfer engine ------------------------------------------------------

struct gather_request {
  flow_id flow = 0;
  gather_source source;
};

// The rows of a gather, in staging memory of the engine's backend (host
// memory on the CPU backend, device memory with CUDA): row i is the i-th
// position of `selections`, layer-major. Readable once `done` completes.
struct fetched_rows {
  seq_id seq = 0;
  flow_id flow = 0;
  std::vector<topk_selection> selections;
  std::size_t row_bytes = 0;
  std::int64_t n_rows = 0;
  std::shared_ptr<buffer> staging;
  std::shared_ptr<transfer_event> done;

  const std::byte* row(std::int64_t i) const { return staging->as<const std::byte>() + std::size_t(i) * row_bytes; }
};

struct fetch_ticket {
  std::shared_ptr<const fetched_rows> rows;
};

// The rows planned for one step of a sequence: one ticket per layer, in
// layer order. Each completes on its own, so a step can start on layer 0
// while the gathers of later layers still run.
struct fetch_plan {
  std::vector<std::shared_ptr<const fetched_rows>> layers;
};

// ---- speculation planner --------------------------------------------------

struct spec_request {
  std::shared_ptr<const spec_scores> scores;
};

// ---- gpu worker -------------------------------------------------------------

// A token picker for one sequence, made from its sampling parameters (it
// holds the sequence's random state). The scheduler makes it; the worker
// calls it, on its own thread only, right after the forward, so logits never
// travel and the next step can be queued before the token is known.
using token_picker = std::function<std::int32_t(std::span<const float> logits)>;

// One sequence's part of a step: prefill runs the prompt, decode one token,
// at positions pos0 .. pos0 + tokens.size() - 1 of its cache. A cache mode
// that reads prefetched rows gets them in `fetched`, one ticket per layer
// (the compute waits on each ticket's event before that layer reads it).
// `pick` chooses the entry's next token. With
// `sampled_token` the entry's one token is the one this worker picked for the
// sequence in its previous step (tokens is empty): the scheduler queues the
// step before that token reaches it. `sampling` is the sequence's parameters,
// for computes that pick their tokens themselves (speculative decoding needs
// the distributions, not one draw); they keep one seeded generator per
// sequence, so a seed still gives one output.
struct step_entry {
  seq_id seq = 0;
  seq_phase phase = seq_phase::decode;
  std::vector<std::int32_t> tokens;
  std::int64_t pos0 = 0;
  std::vector<std::shared_ptr<const fetched_rows>> fetched;
  std::shared_ptr<token_picker> pick;
  bool sampled_token = false;
  sampling_params sampling;
};

struct step_request {
  std::uint64_t step = 0;
  std::vector<step_entry> entries;
};

// A sequence's outcome of a step. `error` non-empty: this sequence failed
// (the others of the step may have succeeded). A compute that speculates
// sent the planner, layer by layer while it ran, the scores of a query at
// plan_position: the scheduler collects those plan_layers gathers as the
// rows of the sequence's next step. `specache` holds SpeCache's hit and
// speculative-token figures of the step.
//
// A compute that decodes several tokens per step (QuantSpec: the kept drafts
// and the target's correction or bonus token) fills `tokens` itself and the
// worker picks nothing; the scheduler takes them in order and may drop the
// tail (EOS, a stop string, max_tokens). Their rows then hold one position
// per token taken before the last: rows.n_tokens = input tokens kept.
struct step_output {
  seq_id seq = 0;
  std::string error;
  std::int32_t token = -1;     // picked by the worker from the last token's logits
  std::vector<std::int32_t> tokens;  // several tokens decided by the compute; empty: `token` alone
  std::vector<float> logits;  // [vocab] for the entry's last token; empty once picked
  std::shared_ptr<const kv_rows> rows;
  std::int64_t plan_position = -1;  // -1: no rows planned for the next step
  int plan_layers = 0;
  specache_stats specache;
  std::int64_t cache_length = 0;  // after the step
  // The forward that produced this output ran from compute_start_us to
  // compute_end_us (trace clock; entries batched into one forward share it);
  // compute_us is this entry's share of the worker's time (a batch's time
  // split over its entries) plus its pick, so that shares add up.
  double compute_start_us = 0, compute_end_us = 0;
  double compute_us = 0;
  double wait_us = 0;             // time waiting on fetched rows
  spec_decode_stats spec;         // speculative rounds of this step
  // Phases of the compute worth a trace span of their own (a QuantSpec
  // round's draft and verify, SpeCache's per-layer GPU work on its three
  // streams), on the trace clock; the worker emits them on its own track,
  // or on `track` where one is named, in category `cat`.
  struct phase_span {
    const char* name = "";
    double t0_us = 0, t1_us = 0;
    std::vector<std::pair<std::string, double>> args;
    std::string track;
    const char* cat = trace_cat::compute;
  };
  std::vector<phase_span> spans;
  // The spans time the device's own work (CUDA events): the worker's span of
  // the forward then becomes category control, so that `trace summary`
  // counts the device spans as the compute a transfer hides under.
  bool device_spans = false;
};

struct step_result {
  std::uint64_t step = 0;
  int worker = 0;
  double start_us = 0, end_us = 0;
  std::vector<step_output> outputs;
};

struct worker_usage {
  int worker = 0;
  std::int64_t sequences = 0;
  std::int64_t cache_bytes = 0;
};

// The first `n` positions of a step's rows (the scheduler keeps the rows of
// the tokens it took when it drops a multi-token step's tail).
inline std::shared_ptr<const kv_rows> kv_rows_prefix(const std::shared_ptr<const kv_rows>& rows, std::int64_t n) {
  if (!rows || n >= rows->n_tokens) return rows;
  auto r = std::make_shared<kv_rows>(*rows);
  r->n_tokens = n < 0 ? 0 : n;
  r->data.resize(std::size_t(r->n_tokens) * std::size_t(r->n_layers) * std::size_t(r->n_kv_heads) * r->row_bytes);
  return r;
}

// ---- scheduler --------------------------------------------------------------

struct scheduler_stats {
  std::int64_t requests_done = 0;
  std::int64_t requests_failed = 0;
  std::int64_t steps = 0;
  std::int64_t decode_steps = 0;
  // Summed over decode steps: from sending the step to handling its result
  // (scheduler side; with a step queued behind a running one this includes
  // the time it waited), and the forward time inside the worker.
  double decode_roundtrip_us = 0;
  double decode_compute_us = 0;
  std::int64_t steps_queued_ahead = 0;  // sent while the worker was still running another
  specache_stats specache;               // summed over the steps of SpeCache modes
};

}  // namespace specpipe
