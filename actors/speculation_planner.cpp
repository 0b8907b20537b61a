#include "actors/speculation_planner.hpp"

#include <map>
#include <optional>
#include <utility>

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/pipeline_error.hpp"

namespace specpipe {
namespace {

// The gathers of one (sequence, query position): the rows of one step.
struct assembly {
  std::vector<std::shared_ptr<const fetched_rows>> layers;
  int arrived = 0;
  int expected = -1;  // set by collect
  std::optional<caf::typed_response_promise<fetch_plan>> promise;
  caf::error failed;
};

using plan_key = std::pair<seq_id, std::int64_t>;

struct planner_state {
  static inline const char* name = "specpipe.planner";
  std::unique_ptr<topk_planner> core;
  kv_store_actor store;
  transfer_engine_actor engine;
  trace_sink trace;
  flow_id next_flow = 1;
  std::map<plan_key, assembly> pending;
  planner_stats stats;

  // Answers the collect once every layer is in (or one failed).
  void settle(const plan_key& key) {
    const auto it = pending.find(key);
    if (it == pending.end() || !it->second.promise) return;
    assembly& a = it->second;
    if (a.failed) {
      a.promise->deliver(a.failed);
    } else {
      if (a.arrived < a.expected) return;
      if (std::int64_t(a.layers.size()) != a.expected) {
        a.promise->deliver(make_pipeline_error(pipeline_errc::invalid_request,
                                               "request " + std::to_string(key.first) + ": " +
                                                   std::to_string(a.layers.size()) + " layers planned, " +
                                                   std::to_string(a.expected) + " expected"));
      } else {
        a.promise->deliver(fetch_plan{std::move(a.layers)});
      }
    }
    pending.erase(it);
  }
};

using self_ptr = planner_actor::stateful_pointer<planner_state>;

// Top-k, resolve at the store, gather at the engine; `done` gets the ticket
// or the error. The selection happens now, the rest asynchronously.
template <class Done>
void plan_and_gather(self_ptr self, const spec_scores& scores, Done done) {
  auto& st = self->state;
  const double t0 = trace_now_us();
  std::vector<topk_selection> sel;
  try {
    sel = st.core->plan(scores);
  } catch (const std::exception& e) {
    ++st.stats.failed;
    done(make_pipeline_error(pipeline_errc::invalid_request, "request " + std::to_string(scores.seq) + ": " + e.what()),
         nullptr);
    return;
  }
  ++st.stats.plans;
  const flow_id flow = st.next_flow++;
  if (st.trace) {
    const double t1 = trace_now_us();
    st.trace.span("planner", "plan", trace_cat::control, t0, t1,
                  {{"seq", double(scores.seq)}, {"layer", double(scores.layer0)}, {"k", double(st.core->k())}});
    st.trace.flow(trace_phase::flow_start, "planner", "topk", flow, t0 + (t1 - t0) / 2);
  }
  self->request(st.store, caf::infinite, resolve_atom_v, scores.seq, std::move(sel))
      .then(
          [self, flow, done](gather_source& src) mutable {
            self->request(self->state.engine, caf::infinite, gather_atom_v, gather_request{flow, std::move(src)})
                .then(
                    [self, done](fetch_ticket& t) mutable {
                      self->state.stats.rows += t.rows->n_rows;
                      self->state.stats.bytes += t.rows->n_rows * std::int64_t(t.rows->row_bytes);
                      done(caf::error{}, std::move(t.rows));
                    },
                    [self, done](caf::error& e) mutable {
                      ++self->state.stats.failed;
                      done(std::move(e), nullptr);
                    });
          },
          [self, done](caf::error& e) mutable {
            ++self->state.stats.failed;
            done(std::move(e), nullptr);
          });
}

planner_actor::behavior_type planner_behavior(self_ptr self, int k, kv_store_actor store, transfer_engine_actor engine,
                                              trace_sink trace) {
  auto& st = self->state;
  st.core = std::make_unique<topk_planner>(k);
  st.store = std::move(store);
  st.engine = std::move(engine);
  st.trace = std::move(trace);
  return {
      [self](plan_atom, const spec_request& req) -> caf::result<fetch_ticket> {
        auto rp = self->make_response_promise<fetch_ticket>();
        plan_and_gather(self, *req.scores, [rp](caf::error e, std::shared_ptr<const fetched_rows> rows) mutable {
          if (e)
            rp.deliver(std::move(e));
          else
            rp.deliver(fetch_ticket{std::move(rows)});
        });
        return rp;
      },
      [self](prefetch_atom, const spec_request& req) {
        const auto& s = *req.scores;
        const plan_key key{s.seq, s.query_position};
        const int layer = s.layer0;
        if (layer < 0 || s.n_layers != 1) {
          auto& a = self->state.pending[key];
          a.failed = make_pipeline_error(pipeline_errc::invalid_request,
                                         "request " + std::to_string(s.seq) + ": prefetch scores must cover one layer");
          self->state.settle(key);
          return;
        }
        self->state.pending[key];  // exists from now on: free() can drop it
        plan_and_gather(self, s, [self, key, layer](caf::error e, std::shared_ptr<const fetched_rows> rows) {
          auto& st = self->state;
          const auto it = st.pending.find(key);
          if (it == st.pending.end()) return;  // freed meanwhile: nobody will read these rows
          assembly& a = it->second;
          if (e) {
            if (!a.failed) a.failed = std::move(e);
          } else {
            if (std::size_t(layer) >= a.layers.size()) a.layers.resize(std::size_t(layer) + 1);
            if (!a.layers[std::size_t(layer)]) ++a.arrived;
            a.layers[std::size_t(layer)] = std::move(rows);
          }
          st.settle(key);
        });
      },
      [self](collect_atom, seq_id seq, std::int64_t position, std::int32_t layers) -> caf::result<fetch_plan> {
        auto rp = self->make_response_promise<fetch_plan>();
        const plan_key key{seq, position};
        auto& a = self->state.pending[key];
        a.expected = layers;
        a.promise = rp;
        self->state.settle(key);
        return rp;
      },
      [self](free_atom, seq_id seq) {
        auto& st = self->state;
        for (auto it = st.pending.lower_bound({seq, INT64_MIN}); it != st.pending.end() && it->first.first == seq;) {
          if (it->second.promise)
            it->second.promise->deliver(make_pipeline_error(pipeline_errc::cancelled,
                                                            "request " + std::to_string(seq) + ": freed"));
          it = st.pending.erase(it);
        }
      },
      [self](stats_atom) { return self->state.stats; },
  };
}

}  // namespace

planner_actor spawn_speculation_planner(caf::actor_system& sys, int k, kv_store_actor store,
                                        transfer_engine_actor engine, trace_sink trace) {
  return sys.spawn(planner_behavior, k, std::move(store), std::move(engine), std::move(trace));
}

}  // namespace specpipe
