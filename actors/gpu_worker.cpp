#include "actors/gpu_worker.hpp"

#include <unordered_map>

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

namespace specpipe {
namespace {

struct gpu_worker_state {
  static inline const char* name = "specpipe.gpu_worker";
  int id = 0;
  std::string track;
  std::shared_ptr<step_compute> compute;  // released with the state: caches go with the actor
  trace_sink trace;
  planner_actor planner;
  // Each sequence's last picked token, for a step queued with sampled_token.
  std::unordered_map<seq_id, std::int32_t> picked;
  // One logits buffer reused by every step: picking here means logits never
  // leave the worker, so no step allocates a vocab-sized vector.
  std::vector<float> logits;

  worker_usage usage() const { return {id, compute->sequences(), compute->cache_bytes()}; }
};

using worker_ptr = gpu_worker_actor::stateful_pointer<gpu_worker_state>;

// The compute's way to the planner. Prefetches are plain sends from this
// thread; an immediate fetch blocks this thread on the planner's answer (the
// step cannot go on without the rows anyway).
speculation_link make_link(worker_ptr self) {
  speculation_link link;
  link.prefetch = [self](std::shared_ptr<const spec_scores> scores) {
    caf::anon_send(self->state.planner, prefetch_atom_v, spec_request{std::move(scores)});
  };
  link.fetch_now = [self](std::shared_ptr<const spec_scores> scores) {
    caf::scoped_actor blocking{self->system()};
    std::shared_ptr<const fetched_rows> rows;
    std::string error;
    blocking->request(self->state.planner, std::chrono::minutes(1), plan_atom_v, spec_request{std::move(scores)})
        .receive([&](fetch_ticket& t) { rows = std::move(t.rows); }, [&](caf::error& e) { error = caf::to_string(e); });
    if (!rows) throw std::runtime_error("rows for this step could not be fetched: " + error);
    return rows;
  };
  link.consumed = [self](const fetched_rows& rows, double t0, double t1) {
    auto& st = self->state;
    if (!st.trace) return;
    if (t1 - t0 >= 1.0) st.trace.span(st.track, "wait rows", trace_cat::control, t0, t1);
    st.trace.flow(trace_phase::flow_end, st.track, "topk", rows.flow, t1);
  };
  return link;
}

gpu_worker_actor::behavior_type gpu_worker_behavior(worker_ptr self, int id, std::shared_ptr<step_compute> compute,
                                                    trace_sink trace, planner_actor planner) {
  auto& st = self->state;
  st.id = id;
  st.track = "worker " + std::to_string(id);
  st.compute = std::move(compute);
  st.trace = std::move(trace);
  st.planner = std::move(planner);
  if (st.planner) st.compute->attach(make_link(self));
  return {
      [self](step_atom, step_request& req) -> caf::result<step_result> {
        auto& st = self->state;
        // A response promise, so a device backend can deliver when its
        // stream is done; the CPU backend delivers before returning.
        auto rp = self->make_response_promise<step_result>();
        step_result res;
        res.step = req.step;
        res.worker = st.id;
        res.start_us = trace_now_us();
        res.outputs.reserve(req.entries.size());
        for (auto& e : req.entries) {
          step_output out;
          out.seq = e.seq;
          if (e.sampled_token) {
            const auto it = st.picked.find(e.seq);
            if (it == st.picked.end())
              out.error = "worker " + std::to_string(st.id) + ": request " + std::to_string(e.seq) +
                          ": a step continues from a picked token, but none was picked (its last step failed?)";
            else
              e.tokens.assign(1, it->second);
          }
          const double t1 = trace_now_us();
          if (out.error.empty()) {
            out.logits.swap(st.logits);
            try {
              st.compute->run(e, out);
              if (!out.tokens.empty()) {
                out.token = out.tokens.back();  // the compute decided its tokens itself
                st.picked[e.seq] = out.token;
              } else if (e.pick) {
                out.token = (*e.pick)(out.logits);
                st.picked[e.seq] = out.token;
                st.compute->picked(e, out.token, out);
              }
            } catch (const std::exception& ex) {
              out.error = "worker " + std::to_string(st.id) + ": request " + std::to_string(e.seq) + ": " + ex.what();
            }
            if (e.pick) out.logits.swap(st.logits);
          }
          if (!out.error.empty()) st.picked.erase(e.seq);
          const double t2 = trace_now_us();
          out.compute_us = t2 - t1;
          if (st.trace) {
            const char* name = e.phase == seq_phase::prefill ? "prefill" : "decode";
            st.trace.span(st.track, name, trace_cat::compute, t1, t2,
                          {{"seq", double(e.seq)}, {"tokens", double(e.tokens.size())}});
            for (auto& sp : out.spans)
              st.trace.span(st.track, sp.name, trace_cat::compute, sp.t0_us, sp.t1_us, std::move(sp.args));
          }
          res.outputs.push_back(std::move(out));
        }
        res.end_us = trace_now_us();
        if (st.trace) {
          st.trace.span(st.track, "step", trace_cat::control, res.start_us, res.end_us,
                        {{"sequences", double(req.entries.size())}});
          st.trace.counter(st.track, "gpu cache", {{"bytes", double(st.compute->cache_bytes())}});
        }
        rp.deliver(std::move(res));
        return rp;
      },
      [self](free_atom, seq_id seq) -> worker_usage {
        self->state.compute->release(seq);
        self->state.picked.erase(seq);
        // After the sequence's last step: none of its prefetches can follow.
        if (self->state.planner) self->send(self->state.planner, free_atom_v, seq);
        return self->state.usage();
      },
      [self](usage_atom) -> worker_usage { return self->state.usage(); },
  };
}

}  // namespace

gpu_worker_actor spawn_gpu_worker(caf::actor_system& sys, int worker_id, std::shared_ptr<step_compute> compute,
                                  trace_sink trace, planner_actor planner) {
  if (!compute) throw std::invalid_argument("gpu worker " + std::to_string(worker_id) + ": no compute given");
  return sys.spawn<caf::detached>(gpu_worker_behavior, worker_id, std::move(compute), std::move(trace),
                                  std::move(planner));
}

}  // namespace specpipe
