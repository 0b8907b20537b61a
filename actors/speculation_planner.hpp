#pragma once
// The speculation planner: turns a step's speculative attention scores into
// top-k fetches (topk_planner), has the store resolve them and the transfer
// engine gather them, and hands the ticket back for the sequence's next step.
// Keeps the hit statistics.
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
    // The rows a step really used: scored against the last plan.
    caf::reacts_to<needed_atom, seq_id, std::vector<topk_selection>>,
    caf::reacts_to<free_atom, seq_id>,
    caf::replies_to<stats_atom>::with<topk_hit_stats>>;

planner_actor spawn_speculation_planner(caf::actor_system& sys, int k, kv_store_actor store,
                                        transfer_engine_actor engine, trace_sink trace = {});

}  // namespace specpipe
