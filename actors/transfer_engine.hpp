#pragma once
// The transfer engine: executes gathers of K/V rows from the host store into
// its staging memory, on its own (detached) thread. It replies at once with
// the ticket (rows + completion event) and copies afterwards, so the step that
// will read the rows can be on its way while the copy runs; the reader waits
// on the event, never on a reply.
#include <chrono>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/kv_store.hpp"
#include "actors/tracer.hpp"
#include "actors/transfer_backend.hpp"
#include "actors/type_ids.hpp"

namespace specpipe {

using transfer_engine_actor = caf::typed_actor<caf::replies_to<gather_atom, gather_request>::with<fetch_ticket>>;

struct transfer_engine_options {
  // Added before every copy: emulates a slow link in tests and benchmarks.
  std::chrono::microseconds extra_latency{0};
};

// `backend`: null means the CPU backend. The store gets the leases back.
transfer_engine_actor spawn_transfer_engine(caf::actor_system& sys, kv_store_actor store,
                                            std::shared_ptr<transfer_backend> backend = nullptr,
                                            transfer_engine_options opts = {}, trace_sink trace = {});

}  // namespace specpipe
