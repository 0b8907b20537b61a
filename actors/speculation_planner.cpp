#include "actors/speculation_planner.hpp"

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/pipeline_error.hpp"

namespace specpipe {
namespace {

struct planner_state {
  static inline const char* name = "specpipe.planner";
  std::unique_ptr<topk_planner> core;
  kv_store_actor store;
  transfer_engine_actor engine;
  trace_sink trace;
  flow_id next_flow = 1;
};

planner_actor::behavior_type planner_behavior(planner_actor::stateful_pointer<planner_state> self, int k,
                                              kv_store_actor store, transfer_engine_actor engine, trace_sink trace) {
  auto& st = self->state;
  st.core = std::make_unique<topk_planner>(k);
  st.store = std::move(store);
  st.engine = std::move(engine);
  st.trace = std::move(trace);
  return {
      [self](plan_atom, const spec_request& req) -> caf::result<fetch_ticket> {
        auto& st = self->state;
        const double t0 = trace_now_us();
        std::vector<topk_selection> sel;
        try {
          sel = st.core->plan(*req.scores);
        } catch (const std::exception& e) {
          return make_pipeline_error(pipeline_errc::invalid_request,
                                     "request " + std::to_string(req.scores->seq) + ": " + e.what());
        }
        const flow_id flow = st.next_flow++;
        if (st.trace) {
          const double t1 = trace_now_us();
          st.trace.span("planner", "plan", trace_cat::control, t0, t1,
                        {{"seq", double(req.scores->seq)}, {"k", double(st.core->k())}});
          st.trace.flow(trace_phase::flow_start, "planner", "topk", flow, t0 + (t1 - t0) / 2);
        }
        auto rp = self->make_response_promise<fetch_ticket>();
        self->request(st.store, caf::infinite, resolve_atom_v, req.scores->seq, std::move(sel))
            .then(
                [self, rp, flow](gather_source& src) mutable {
                  self->request(self->state.engine, caf::infinite, gather_atom_v, gather_request{flow, std::move(src)})
                      .then([rp](fetch_ticket& t) mutable { rp.deliver(std::move(t)); },
                            [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
                },
                [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [self](needed_atom, seq_id seq, const std::vector<topk_selection>& needed) {
        const auto step = self->state.core->record_needed(seq, needed);
        if (self->state.trace)
          self->state.trace.counter("planner", "top-k hit rate", {{"step", step.hit_rate()},
                                                                  {"total", self->state.core->totals().hit_rate()}});
      },
      [self](free_atom, seq_id seq) { self->state.core->forget(seq); },
      [self](stats_atom) { return self->state.core->totals(); },
  };
}

}  // namespace

planner_actor spawn_speculation_planner(caf::actor_system& sys, int k, kv_store_actor store,
                                        transfer_engine_actor engine, trace_sink trace) {
  return sys.spawn(planner_behavior, k, std::move(store), std::move(engine), std::move(trace));
}

}  // namespace specpipe
