#include "actors/transfer_engine.hpp"

#include <thread>

#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/pipeline_error.hpp"

namespace specpipe {
namespace {

struct transfer_engine_state {
  static inline const char* name = "specpipe.transfer_engine";
  std::shared_ptr<transfer_backend> backend;
  kv_store_actor store;
  transfer_engine_options opts;
  trace_sink trace;
  std::int64_t bytes_in_flight = 0;
};

transfer_engine_actor::behavior_type transfer_engine_behavior(
    transfer_engine_actor::stateful_pointer<transfer_engine_state> self, kv_store_actor store,
    std::shared_ptr<transfer_backend> backend, transfer_engine_options opts, trace_sink trace) {
  auto& st = self->state;
  st.backend = backend ? std::move(backend) : std::shared_ptr<transfer_backend>(make_cpu_transfer_backend());
  st.store = std::move(store);
  st.opts = opts;
  st.trace = std::move(trace);
  return {
      [self](gather_atom, gather_request& req) -> caf::result<fetch_ticket> {
        auto& st = self->state;
        const gather_source& src = req.source;
        const std::size_t bytes = src.rows.size() * src.row_bytes;
        auto rows = std::make_shared<fetched_rows>();
        rows->seq = src.seq;
        rows->flow = req.flow;
        rows->selections = src.selections;
        rows->row_bytes = src.row_bytes;
        rows->n_rows = std::int64_t(src.rows.size());
        rows->done = std::make_shared<transfer_event>();
        try {
          rows->staging = st.backend->staging(bytes == 0 ? 1 : bytes);
        } catch (const std::exception& e) {
          caf::anon_send(st.store, unpin_atom_v, src.lease);
          return make_pipeline_error(pipeline_errc::transfer_failed,
                                     "request " + std::to_string(src.seq) + ": staging " + std::to_string(bytes) +
                                         " bytes: " + e.what());
        }
        // Reply first: the ticket travels while the rows do.
        auto rp = self->make_response_promise<fetch_ticket>();
        rp.deliver(fetch_ticket{rows});
        const double t0 = trace_now_us();
        st.bytes_in_flight += std::int64_t(bytes);
        if (st.trace) {
          st.trace.counter("transfer", "bytes in flight", {{"bytes", double(st.bytes_in_flight)}});
          // Before the copy completes, so the tracer has the flow's step
          // before the reader can record its end.
          st.trace.flow(trace_phase::flow_step, "transfer", "topk", req.flow, t0);
        }
        if (st.opts.extra_latency.count() > 0) std::this_thread::sleep_for(st.opts.extra_latency);
        try {
          st.backend->gather(src, rows->staging->data(), *rows->done);
        } catch (const std::exception& e) {
          rows->done->complete("request " + std::to_string(src.seq) + ": gather of " +
                               std::to_string(src.rows.size()) + " rows failed: " + e.what());
        }
        st.bytes_in_flight -= std::int64_t(bytes);
        caf::anon_send(st.store, unpin_atom_v, src.lease);
        if (st.trace) {
          // The span ends when the rows were there, not when this thread got
          // round to recording it.
          const double done_at = rows->done->completed_at_us();
          const double t1 = done_at > 0 ? done_at : trace_now_us();
          st.trace.span("transfer", "gather", trace_cat::transfer, t0, t1,
                        {{"rows", double(src.rows.size())}, {"bytes", double(bytes)}, {"seq", double(src.seq)}});
          st.trace.counter("transfer", "bytes in flight", {{"bytes", double(st.bytes_in_flight)}});
        }
        return rp;
      },
  };
}

}  // namespace

transfer_engine_actor spawn_transfer_engine(caf::actor_system& sys, kv_store_actor store,
                                            std::shared_ptr<transfer_backend> backend, transfer_engine_options opts,
                                            trace_sink trace) {
  return sys.spawn<caf::detached>(transfer_engine_behavior, std::move(store), std::move(backend), opts,
                                  std::move(trace));
}

}  // namespace specpipe
