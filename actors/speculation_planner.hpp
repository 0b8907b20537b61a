#pragma once
// The speculation planner: turns speculative attention scores into top-k
// fetches (topk_planner), has the store resolve them and the transfer engine
// gather them.
//
// Two ways in. A worker that speculates sends one layer's scores at a time
// with `prefetch` while its step still runs; the gathers start at once, and
// the scheduler, once the step's result is in, `collect`s the tickets of all
// layers of that (sequence, query position) as the rows of the sequence's
// next step (answered when the last layer's ticket exists, which is before
// its copy completes). `plan` gathers immediately and answers with the
// ticket (the output-prefetch ablation, whose step waits for it).
// A sequence's state goes with `free`, which its worker sends after its
// last step, so no prefetch of that sequence can follow it.
#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/kv_store.hpp"
#include "actors/tracer.hpp"
#include "actors/transfer_engine.hpp"
#include "actors/type_ids.hpp"

namespace specpipe {

using planner_actor = caf::typed_actor<
    caf::replies_to<plan_atom, spec_request>::with<fetch_ticket>,
    caf::reacts_to<prefetch_atom, spec_request>,
    // (sequence, query position, layers): the gathers prefetch started.
    caf::replies_to<collect_atom, seq_id, std::int64_t, std::int32_t>::with<fetch_plan>,
    caf::reacts_to<free_atom, seq_id>,
    caf::replies_to<stats_atom>::with<planner_stats>>;

planner_actor spawn_speculation_planner(caf::actor_system& sys, int k, kv_store_actor store,
                                        transfer_engine_actor engine, trace_sink trace = {});

}  // namespace specpipe
