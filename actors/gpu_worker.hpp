#pragma once
// A GPU worker: one per device (the CPU backend counts as one), spawned
// detached so it owns its thread, as CUDA contexts are per thread. Holds the
// device's compute (weights reference, per-sequence caches) and runs the
// steps it is sent, picking each sequence's next token after its forward. A
// sequence whose forward throws gets an error in its step_output; the other
// sequences of the step are unaffected. With a planner, a compute that
// speculates sends it scores while it runs (step_compute's speculation_link),
// and the worker tells it when a sequence's state is gone (free).
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/speculation_planner.hpp"
#include "actors/step_compute.hpp"
#include "actors/tracer.hpp"
#include "actors/type_ids.hpp"

namespace specpipe {

using gpu_worker_actor = caf::typed_actor<
    caf::replies_to<step_atom, step_request>::with<step_result>,
    caf::replies_to<free_atom, seq_id>::with<worker_usage>,
    caf::replies_to<usage_atom>::with<worker_usage>>;

gpu_worker_actor spawn_gpu_worker(caf::actor_system& sys, int worker_id, std::shared_ptr<step_compute> compute,
                                  trace_sink trace = {}, planner_actor planner = {});

}  // namespace specpipe
