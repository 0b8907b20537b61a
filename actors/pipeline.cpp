#include "actors/pipeline.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actors/pipeline_error.hpp"

namespace specpipe {
namespace {

[[noreturn]] void raise(const caf::error& e) { throw pipeline_failure(e, describe(e)); }

}  // namespace

pipeline::pipeline(caf::actor_system& sys, std::vector<std::shared_ptr<step_compute>> computes, pipeline_options opts)
    : sys_(sys), opts_(std::move(opts)) {
  if (computes.empty()) throw std::invalid_argument("pipeline: at least one compute (worker) is needed");
  const compute_shape shape = computes.front()->shape();
  for (const auto& c : computes)
    if (c->shape().n_layers != shape.n_layers || c->shape().n_kv_heads != shape.n_kv_heads ||
        c->shape().head_dim != shape.head_dim || c->shape().speculative != shape.speculative ||
        c->shape().multi_token != shape.multi_token)
      throw std::invalid_argument("pipeline: workers disagree on the model shape");
  trace_sink trace;
  if (opts_.trace) {
    tracer_ = spawn_tracer(sys, opts_.trace_file);
    trace = trace_sink(tracer_);
  }
  kv_store_options so{shape.n_layers, shape.n_kv_heads, shape.head_dim, opts_.block_tokens, opts_.store_budget_bytes};
  if (so.budget_bytes == 0) {
    // Every seat at full context, rounded up to whole blocks per stream.
    const std::int64_t blocks_per_seq =
        (opts_.max_context + opts_.block_tokens - 1) / opts_.block_tokens * shape.n_layers * shape.n_kv_heads;
    so.budget_bytes = std::size_t(blocks_per_seq) * kv_block_bytes(so) * computes.size() *
                      std::size_t(opts_.max_sequences_per_worker);
  }
  store_ = spawn_kv_store(sys, so, trace);
  engine_ = spawn_transfer_engine(sys, store_, opts_.backend, opts_.transfer, trace);
  planner_ = spawn_speculation_planner(sys, opts_.topk, store_, engine_, trace);
  for (std::size_t i = 0; i < computes.size(); ++i)
    workers_.push_back(spawn_gpu_worker(sys, int(i), computes[i], trace, shape.speculative ? planner_ : planner_actor{}));
  scheduler_options so2;
  so2.workers = workers_;
  so2.store = store_;
  so2.planner = planner_;
  so2.trace = trace;
  so2.capacity = opts_.capacity;
  so2.max_sequences_per_worker = opts_.max_sequences_per_worker;
  so2.max_context = opts_.max_context;
  so2.vocab_size = shape.vocab;
  so2.eos_ids = opts_.eos_ids;
  so2.detokenize = opts_.detokenize;
  so2.make_picker = opts_.make_picker;
  so2.step_timeout = opts_.step_timeout;
  so2.pipelined = !shape.speculative && !shape.multi_token;
  scheduler_ = spawn_scheduler(sys, std::move(so2));
}

pipeline::~pipeline() {
  // Upstream first, so nobody is left sending to an actor that is gone.
  caf::anon_send_exit(scheduler_, caf::exit_reason::user_shutdown);
  for (const auto& w : workers_) caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(planner_, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(engine_, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(store_, caf::exit_reason::user_shutdown);
  if (tracer_) {
    try {
      flush_trace();
    } catch (const std::exception&) {
      // The tracer's state writes the file again at exit and reports there.
    }
    caf::anon_send_exit(tracer_, caf::exit_reason::user_shutdown);
  }
}

generation_result pipeline::generate(std::uint64_t id, const generation_request& req,
                                     const std::function<void(std::string_view)>& on_delta,
                                     std::chrono::milliseconds timeout) {
  // Deltas go to a small sink actor that calls on_delta in order; the result
  // comes as the reply to this blocking request.
  caf::actor sink;
  if (on_delta)
    sink = sys_.spawn([on_delta](caf::event_based_actor*) -> caf::behavior {
      return {
          [on_delta](delta_atom, std::uint64_t, std::int32_t, const std::string& text) {
            if (!text.empty()) on_delta(text);
          },
          [](flush_atom) { return true; },
      };
    });
  caf::scoped_actor self{sys_};
  generation_result result;
  caf::error failure;
  self->request(scheduler_, timeout, generate_atom_v, id, req, sink)
      .receive([&](generation_result& r) { result = std::move(r); }, [&](caf::error& e) { failure = std::move(e); });
  if (failure == caf::sec::request_timeout) {
    // Nobody waits for this request any more: stop it, so it gives back its
    // seat and store blocks instead of decoding to the end.
    self->request(scheduler_, std::chrono::seconds(5), cancel_atom_v, id).receive([](bool) {}, [](caf::error&) {});
  }
  if (sink) {
    // Deltas were queued at the sink before the result was sent: once it
    // answers this, it has handed every one of them to on_delta.
    self->request(sink, timeout, flush_atom_v).receive([](bool) {}, [](caf::error&) {});
    self->send_exit(sink, caf::exit_reason::user_shutdown);
  }
  if (failure) raise(failure);
  return result;
}

scheduler_stats pipeline::stats() {
  caf::scoped_actor self{sys_};
  scheduler_stats out;
  self->request(scheduler_, std::chrono::seconds(30), stats_atom_v)
      .receive([&](scheduler_stats& s) { out = s; }, [](caf::error& e) { raise(e); });
  return out;
}

kv_usage pipeline::store_usage() {
  caf::scoped_actor self{sys_};
  kv_usage out;
  self->request(store_, std::chrono::seconds(30), usage_atom_v)
      .receive([&](kv_usage& u) { out = u; }, [](caf::error& e) { raise(e); });
  return out;
}

worker_usage pipeline::usage_of(std::size_t worker) {
  caf::scoped_actor self{sys_};
  worker_usage out;
  self->request(workers_.at(worker), std::chrono::seconds(30), usage_atom_v)
      .receive([&](worker_usage& u) { out = u; }, [](caf::error& e) { raise(e); });
  return out;
}

std::uint64_t pipeline::flush_trace() {
  if (!tracer_) return 0;
  caf::scoped_actor self{sys_};
  std::uint64_t n = 0;
  self->request(tracer_, std::chrono::seconds(60), flush_atom_v)
      .receive([&](std::uint64_t k) { n = k; }, [](caf::error& e) { raise(e); });
  return n;
}

}  // namespace specpipe
