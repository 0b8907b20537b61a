#pragma once
// The scheduler: owns the requests and their sequences. Admits generation
// requests onto workers, forms each worker's steps with batch_former
// (continuous batching: prefills join running decodes), samples and streams
// tokens back, and turns worker, store or planner failures into error results
// for exactly the requests they affect. Nothing waits forever: every request
// it sends carries a timeout.
//
// Protocol: (generate, id, request, sink) is answered with the
// generation_result when the sequence ends, or an error (cancelled, invalid,
// store exhausted, worker failed, ...). While it runs, `sink` (any actor, or
// an invalid handle for none) receives (delta, id, token, text) per sampled
// token; the deltas concatenated are result.text.
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/batch_former.hpp"
#include "actors/gpu_worker.hpp"
#include "actors/kv_store.hpp"
#include "actors/speculation_planner.hpp"
#include "model/text_stream.hpp"
#include "actors/tracer.hpp"
#include "actors/type_ids.hpp"

namespace specpipe {

using scheduler_actor = caf::typed_actor<
    caf::replies_to<generate_atom, std::uint64_t, generation_request, caf::actor>::with<generation_result>,
    // true when the request was running and is now cancelled.
    caf::replies_to<cancel_atom, std::uint64_t>::with<bool>,
    caf::replies_to<stats_atom>::with<scheduler_stats>>;

// Makes a sequence's token picker (actors/messages.hpp) from its sampling
// parameters; throws std::invalid_argument naming the field when they are
// out of range.
using picker_factory = std::function<token_picker(const sampling_params&)>;

struct scheduler_options {
  std::vector<gpu_worker_actor> workers;  // at least one
  kv_store_actor store;
  planner_actor planner;  // optional: needed only by cache modes that speculate
  trace_sink trace;
  batch_capacity capacity{};
  batch_policy policy = decode_first{};
  std::int32_t max_sequences_per_worker = 8;
  std::int64_t max_context = 0;  // tokens per sequence
  std::int64_t vocab_size = 0;
  std::vector<std::int32_t> eos_ids;
  detokenizer detokenize;
  picker_factory make_picker;
  std::chrono::milliseconds step_timeout{std::chrono::minutes(5)};
  // Queue a sequence's next decode step behind the running one (the worker
  // picks the token itself), so the worker never waits for a message between
  // steps. Off for cache modes whose next step needs the planner's rows.
  bool pipelined = true;
};

scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_options opts);

}  // namespace specpipe
