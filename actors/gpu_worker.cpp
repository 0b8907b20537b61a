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
  // Logits buffers reused by every step, one per entry: picking here means
  // logits never leave the worker, so no step allocates vocab-sized vectors.
  std::vector<std::vector<float>> logits;  // one per entry of the largest step so far

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

// The step's spans: one per forward (entries batched into one forward
// share a span, named by their phase), the compute's own phase spans, and
// the step itself.
void trace_step(gpu_worker_state& st, const step_request& req, const step_result& res) {
  for (std::size_t i = 0; i < res.outputs.size();) {
    const step_output& out = res.outputs[i];
    std::size_t j = i + 1;
    double tokens = double(req.entries[i].tokens.size());
    while (j < res.outputs.size() && res.outputs[j].compute_start_us == out.compute_start_us &&
           res.outputs[j].compute_end_us == out.compute_end_us && req.entries[j].phase == req.entries[i].phase) {
      tokens += double(req.entries[j].tokens.size());
      ++j;
    }
    if (out.compute_end_us > out.compute_start_us) {
      const char* name = req.entries[i].phase == seq_phase::prefill ? "prefill" : "decode";
      std::vector<std::pair<std::string, double>> args{{"tokens", tokens}};
      if (j - i == 1) args.insert(args.begin(), {"seq", double(out.seq)});
      else args.insert(args.begin(), {"sequences", double(j - i)});
      st.trace.span(st.track, name, out.device_spans ? trace_cat::control : trace_cat::compute, out.compute_start_us,
                    out.compute_end_us, std::move(args));
    }
    i = j;
  }
  for (const auto& out : res.outputs)
    for (const auto& sp : out.spans)
      st.trace.span(sp.track.empty() ? st.track : sp.track, sp.name, sp.cat, sp.t0_us, sp.t1_us, sp.args);
  st.trace.span(st.track, "step", trace_cat::control, res.start_us, res.end_us,
                {{"sequences", double(req.entries.size())}});
  st.trace.counter(st.track, "gpu cache", {{"bytes", double(st.compute->cache_bytes())}});
}

gpu_worker_actor::behavior_type gpu_worker_behavior(worker_ptr self, int id, std::shared_ptr<step_compute> compute,
                                                    trace_sink trace, planner_actor planner) {
  auto& st = self->state;
  st.id = id;
  st.compute = std::move(compute);
  st.track = std::string(st.compute->track_prefix()) + "worker " + std::to_string(id);
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
        const std::size_t n = req.entries.size();
        res.outputs.resize(n);
        if (st.logits.size() < n) st.logits.resize(n);
        for (std::size_t i = 0; i < n; ++i) {
          step_entry& e = req.entries[i];
          step_output& out = res.outputs[i];
          out.seq = e.seq;
          if (e.sampled_token) {
            const auto it = st.picked.find(e.seq);
            if (it == st.picked.end())
              out.error = "a step continues from a picked token, but none was picked (its last step failed?)";
            else
              e.tokens.assign(1, it->second);
          }
          if (out.error.empty()) out.logits.swap(st.logits[i]);
        }
        try {
          st.compute->run_batch(req.entries, res.outputs);
        } catch (const std::exception& ex) {  // run_batch reports per entry; this is a broken compute
          for (auto& out : res.outputs)
            if (out.error.empty()) out.error = ex.what();
        }
        for (std::size_t i = 0; i < n; ++i) {
          const step_entry& e = req.entries[i];
          step_output& out = res.outputs[i];
          if (out.error.empty()) {
            const double t0 = trace_now_us();
            try {
              if (!out.tokens.empty()) {
                out.token = out.tokens.back();  // the compute decided its tokens itself
                st.picked[e.seq] = out.token;
              } else if (e.pick) {
                out.token = (*e.pick)(out.logits);
                st.picked[e.seq] = out.token;
                st.compute->picked(e, out.token, out);
              }
            } catch (const std::exception& ex) {
              out.error = ex.what();
            }
            out.compute_us += trace_now_us() - t0;
          }
          // Picked outputs give their logits buffer back for the next step.
          if (e.pick || !out.error.empty()) out.logits.swap(st.logits[i]);
          if (!out.error.empty()) {
            out.error = "worker " + std::to_string(st.id) + ": request " + std::to_string(e.seq) + ": " + out.error;
            st.picked.erase(e.seq);
          }
        }
        res.end_us = trace_now_us();
        if (st.trace) trace_step(st, req, res);
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
