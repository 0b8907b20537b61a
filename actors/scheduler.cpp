#include "actors/scheduler.hpp"

#include <algorithm>
#include <unordered_set>
#include <deque>
#include <limits>
#include <map>

#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/pipeline_error.hpp"

namespace specpipe {
namespace {

constexpr std::size_t no_worker = std::numeric_limits<std::size_t>::max();

// Steps a worker holds at once when pipelined: the running one and the one
// queued behind it, which the worker starts without waiting for a message.
constexpr int max_worker_steps = 2;

struct sequence {
  std::uint64_t id = 0;
  generation_request req;
  caf::actor sink;
  caf::typed_response_promise<generation_result> promise;
  std::size_t worker = no_worker;
  seq_phase phase = seq_phase::prefill;
  std::uint64_t arrival = 0;
  std::shared_ptr<token_picker> pick;  // called by the worker only
  text_stream text;
  std::int64_t cache_length = 0;
  std::int32_t next_token = 0;
  generation_result res;
  double decode_start_us = 0;
  int in_step = 0;                // steps sent and not answered (2: one queued ahead)
  std::int64_t pos_ahead = 0;     // cache length once those steps have run
  bool awaiting_plan = false;
  bool reserving = false;         // seated, waiting for the store's reservation
  int appends_in_flight = 0;      // rows sent to the store, not yet acknowledged
  const char* ended = nullptr;    // finish reason, once decided

  std::vector<std::shared_ptr<const fetched_rows>> fetched;  // for the next step, per layer
};

struct worker_slot {
  gpu_worker_actor actor;
  bool alive = true;
  int steps = 0;  // sent, not answered
  std::int64_t sequences = 0;
};

struct scheduler_state {
  static inline const char* name = "specpipe.scheduler";
  scheduler_options opts;
  std::unique_ptr<batch_former> former;
  std::map<std::uint64_t, sequence> seqs;
  // Every id ever admitted. Replies are matched to sequences by id, and a
  // finished sequence can still have a queued step, an append or a plan in
  // flight: an id used again would receive them. So ids are never reused.
  std::unordered_set<std::uint64_t> used_ids;
  std::deque<std::uint64_t> pending;  // admitted, waiting for a worker seat
  std::vector<worker_slot> workers;
  std::uint64_t next_arrival = 0;
  std::uint64_t next_step = 1;
  scheduler_stats stats;
};

using self_ptr = scheduler_actor::stateful_pointer<scheduler_state>;

void kick(self_ptr self, std::size_t w);
void seat_pending(self_ptr self);

// Frees what a sequence holds (store rows, worker cache, planner memory) and
// forgets it. The caller answers its promise after this, so the frees are
// queued at the store and worker before the client can ask them anything.
void drop(self_ptr self, std::uint64_t id) {
  auto& st = self->state;
  const auto it = st.seqs.find(id);
  if (it == st.seqs.end()) return;
  const std::size_t w = it->second.worker;
  st.seqs.erase(it);
  st.pending.erase(std::remove(st.pending.begin(), st.pending.end(), id), st.pending.end());
  const auto timeout = st.opts.step_timeout;
  // Failures to free are not the client's business any more: ignored.
  self->request(st.opts.store, timeout, free_atom_v, seq_id(id)).then([](kv_usage&) {}, [](caf::error&) {});
  // The planner hears of it from the worker, after the sequence's last step
  // (whose prefetches must not arrive after the free).
  if (w != no_worker) {
    auto& slot = st.workers[w];
    --slot.sequences;
    if (slot.alive) self->request(slot.actor, timeout, free_atom_v, seq_id(id)).then([](worker_usage&) {}, [](caf::error&) {});
  }
}

void fail(self_ptr self, std::uint64_t id, const caf::error& err) {
  auto& st = self->state;
  const auto it = st.seqs.find(id);
  if (it == st.seqs.end()) return;
  ++st.stats.requests_failed;
  auto promise = it->second.promise;
  // Frees first: they are in the store's and worker's mailboxes before the
  // client hears, so whatever the client asks them next sees them done.
  drop(self, id);
  promise.deliver(err);
}

// fail() outside the step loop (a store or planner reply, a cancel): the freed
// seat and the worker go back to work here, since no step result will.
void fail_and_reseat(self_ptr self, std::uint64_t id, const caf::error& err) {
  const auto it = self->state.seqs.find(id);
  const std::size_t w = it == self->state.seqs.end() ? no_worker : it->second.worker;
  fail(self, id, err);
  seat_pending(self);
  kick(self, w);
}

// Answers a sequence that has ended and whose rows the store has all
// acknowledged.
void complete(self_ptr self, sequence& s) {
  auto& st = self->state;
  if (std::string rest = s.text.flush(); !rest.empty() && s.sink)
    caf::anon_send(s.sink, delta_atom_v, s.id, std::int32_t(-1), std::move(rest));
  s.res.tokens = s.text.tokens();
  s.res.text = s.text.text();
  s.res.finish_reason = s.ended;
  s.res.decode_seconds = s.decode_start_us > 0 ? (trace_now_us() - s.decode_start_us) / 1e6 : 0;
  ++st.stats.requests_done;
  auto promise = s.promise;
  auto res = std::move(s.res);
  drop(self, s.id);  // frees before the answer, as in fail()
  promise.deliver(std::move(res));
}

// A sequence has ended. It is reported finished only once every append of
// its rows is acknowledged: an append the store refuses fails the request
// instead, so a request whose KV was not stored never reports success.
void finish(self_ptr self, sequence& s, const char* reason) {
  s.ended = reason;
  if (s.appends_in_flight == 0) complete(self, s);
}

// Asks the store for the sequence's whole host KV up front, prompt +
// max_tokens clamped to the context, before its prefill is sent: a request
// the budget cannot hold fails now, and the appends of one that was admitted
// cannot be refused halfway through its generation.
void reserve(self_ptr self, sequence& s) {
  auto& st = self->state;
  s.reserving = true;
  const std::int64_t tokens =
      std::min(st.opts.max_context, std::int64_t(s.req.prompt.size()) + std::int64_t(s.req.max_tokens));
  const std::uint64_t id = s.id;
  self->request(st.opts.store, st.opts.step_timeout, reserve_atom_v, seq_id(id), tokens)
      .then(
          [self, id](kv_usage&) {
            const auto it = self->state.seqs.find(id);
            if (it == self->state.seqs.end()) return;  // cancelled meanwhile; its free follows the reserve
            it->second.reserving = false;
            kick(self, it->second.worker);
          },
          [self, id](caf::error& e) { fail_and_reseat(self, id, e); });
}

// Sends a step's rows to the store. Counted until acknowledged, so that
// finish() can wait for them.
void append_rows(self_ptr self, std::uint64_t id, std::shared_ptr<const kv_rows> rows) {
  auto& st = self->state;
  const auto it = st.seqs.find(id);
  if (it == st.seqs.end()) return;  // failed or cancelled in this same step: its rows are not wanted
  self->request(st.opts.store, st.opts.step_timeout, append_atom_v, kv_append{std::move(rows)})
      .then(
          [self, id](kv_usage&) {
            const auto it = self->state.seqs.find(id);
            if (it == self->state.seqs.end()) return;
            sequence& s = it->second;
            if (--s.appends_in_flight == 0 && s.ended) {
              const std::size_t w = s.worker;
              complete(self, s);
              seat_pending(self);
              kick(self, w);
            }
          },
          [self, id](caf::error& e) { fail_and_reseat(self, id, e); });
}

// Seats waiting sequences on the live worker with the fewest sequences.
void seat_pending(self_ptr self) {
  auto& st = self->state;
  while (!st.pending.empty()) {
    std::size_t best = no_worker;
    bool any_alive = false;
    for (std::size_t w = 0; w < st.workers.size(); ++w) {
      const auto& slot = st.workers[w];
      any_alive = any_alive || slot.alive;
      if (!slot.alive || slot.sequences >= st.opts.max_sequences_per_worker) continue;
      if (best == no_worker || slot.sequences < st.workers[best].sequences) best = w;
    }
    if (!any_alive) {
      const auto id = st.pending.front();
      fail(self, id, make_pipeline_error(pipeline_errc::no_worker, "request " + std::to_string(id) +
                                                                      ": every worker has failed"));
      continue;
    }
    if (best == no_worker) return;  // all seats taken: wait for a sequence to end
    const auto id = st.pending.front();
    st.pending.pop_front();
    sequence& s = st.seqs.at(id);
    s.worker = best;
    ++st.workers[best].sequences;
    reserve(self, s);
  }
}

// A worker is gone or stuck: its sequences fail, it gets no more steps.
void lose_worker(self_ptr self, std::size_t w, const std::string& why) {
  auto& st = self->state;
  auto& slot = st.workers[w];
  if (!slot.alive) return;
  slot.alive = false;
  std::vector<std::uint64_t> victims;
  for (const auto& [id, s] : st.seqs)
    if (s.worker == w) victims.push_back(id);
  for (const auto id : victims)
    fail(self, id, make_pipeline_error(pipeline_errc::worker_failed,
                                       "request " + std::to_string(id) + ": worker " + std::to_string(w) + " " + why));
  seat_pending(self);
}

// One sampled token: streams it and decides whether the sequence goes on.
// Returns false when the sequence ended (and is gone).
bool take_token(self_ptr self, sequence& s, std::int32_t tok) {
  const auto& o = self->state.opts;
  if (!s.req.ignore_eos && std::find(o.eos_ids.begin(), o.eos_ids.end(), tok) != o.eos_ids.end()) {
    finish(self, s, "stop");
    return false;
  }
  auto pushed = s.text.push(tok);
  if (pushed.stopped) {
    finish(self, s, "stop");
    return false;
  }
  if (s.sink) caf::anon_send(s.sink, delta_atom_v, s.id, tok, std::move(pushed.delta));
  if (std::int64_t(s.text.tokens().size()) >= s.req.max_tokens || s.cache_length >= o.max_context) {
    finish(self, s, "length");
    return false;
  }
  s.next_token = tok;
  s.phase = seq_phase::decode;
  return true;
}

// A step's tokens in order: its one picked token, or the several a
// speculative round decided. Each may end the sequence, dropping the rest;
// the cache length a token sees counts the positions before it, and the rows
// of positions after the last token taken are dropped with them.
bool take_tokens(self_ptr self, sequence& s, const step_output& out, std::shared_ptr<const kv_rows>* rows) {
  if (out.tokens.empty()) return take_token(self, s, out.token);
  const auto n = std::int64_t(out.tokens.size());
  for (std::int64_t i = 0; i < n; ++i) {
    s.cache_length = out.cache_length - (n - 1 - i);
    if (!take_token(self, s, out.tokens[std::size_t(i)])) {
      // s may be gone (nothing in flight kept it); only the rows are touched.
      if (rows && *rows) *rows = kv_rows_prefix(*rows, (*rows)->n_tokens - (n - 1 - i));
      return false;
    }
  }
  return true;
}

// Collects the rows the worker had the planner gather, layer by layer while
// the step ran, for the sequence's next step; the sequence waits for them.
void collect_plan(self_ptr self, std::uint64_t id, std::int64_t position, int layers) {
  if (!self->state.seqs.count(id)) return;
  self->request(self->state.opts.planner, self->state.opts.step_timeout, collect_atom_v, seq_id(id), position,
                std::int32_t(layers))
      .then(
          [self, id](fetch_plan& p) {
            const auto it = self->state.seqs.find(id);
            if (it == self->state.seqs.end()) return;
            it->second.fetched = std::move(p.layers);
            it->second.awaiting_plan = false;
            kick(self, it->second.worker);
          },
          [self, id](caf::error& e) { fail_and_reseat(self, id, e); });
}

void on_step_result(self_ptr self, std::size_t w, double sent_us, step_result& res) {
  auto& st = self->state;
  const double got_us = trace_now_us();
  --st.workers[w].steps;
  bool any_decode = false;
  double compute_us = 0;
  // The next step goes out before the store and planner hear of this one:
  // the worker is the critical path. Rows go to the store before any plan
  // request, whose resolve must find them there; they count as in flight at
  // once, so a sequence that ends in this step waits for them.
  std::vector<std::pair<std::uint64_t, std::shared_ptr<const kv_rows>>> appends;
  struct plan_ref {
    std::uint64_t id;
    std::int64_t position;
    int layers;
  };
  std::vector<plan_ref> plans;
  appends.reserve(res.outputs.size());
  for (auto& out : res.outputs) {
    const auto it = st.seqs.find(out.seq);
    if (it == st.seqs.end()) continue;  // cancelled while the step ran
    sequence& s = it->second;
    --s.in_step;
    if (s.ended) continue;  // a step queued ahead of an end it could not foresee
    if (out.error.empty() && out.token < 0 && out.tokens.empty())
      out.error = "worker " + std::to_string(w) + " returned no token";
    if (!out.error.empty()) {
      fail(self, s.id, make_pipeline_error(pipeline_errc::worker_failed, out.error));
      continue;
    }
    compute_us += out.compute_us;
    const bool was_prefill = s.phase == seq_phase::prefill;
    any_decode = any_decode || !was_prefill;
    s.cache_length = out.cache_length;
    std::shared_ptr<const kv_rows>* rows = nullptr;
    if (out.rows) {
      ++s.appends_in_flight;
      appends.emplace_back(s.id, std::move(out.rows));
      rows = &appends.back().second;
    }
    st.stats.specache.merge(out.specache);
    s.res.spec.merge(out.spec);
    if (was_prefill) {
      s.res.prefill_seconds = (got_us - sent_us) / 1e6;
      s.decode_start_us = got_us;
      if (s.req.max_tokens == 0) {
        finish(self, s, "length");
        continue;
      }
    } else {
      ++s.res.decode_forwards;
    }
    if (!take_tokens(self, s, out, rows)) continue;
    if (out.plan_position >= 0) {
      if (!st.opts.planner) {
        fail(self, s.id, make_pipeline_error(pipeline_errc::invalid_request,
                                             "request " + std::to_string(s.id) + ": its cache mode plans rows, "
                                             "but the pipeline has no planner"));
        continue;
      }
      s.awaiting_plan = true;
      plans.push_back({s.id, out.plan_position, out.plan_layers});
    }
  }
  kick(self, w);
  for (auto& [id, rows] : appends) append_rows(self, id, std::move(rows));
  for (const auto& p : plans) collect_plan(self, p.id, p.position, p.layers);
  ++st.stats.steps;
  if (any_decode) {
    ++st.stats.decode_steps;
    st.stats.decode_roundtrip_us += got_us - sent_us;
    st.stats.decode_compute_us += compute_us;
  }
  if (st.opts.trace) st.opts.trace.span("scheduler", "step round trip", trace_cat::control, sent_us, got_us,
                                        {{"worker", double(w)}, {"sequences", double(res.outputs.size())}});
  seat_pending(self);
  kick(self, w);
}

// Whether the sequence's next decode can be queued behind its running step:
// that step must not be able to end it by length (its token would be its
// last, or the context is full). An end by EOS or a stop string cannot be
// foreseen: the queued step is then wasted, its output dropped.
bool can_queue_ahead(const scheduler_state& st, const sequence& s) {
  return st.opts.pipelined && s.in_step == 1 && !s.awaiting_plan &&
         std::int64_t(s.text.tokens().size()) + 1 < std::int64_t(s.req.max_tokens) &&
         s.pos_ahead < st.opts.max_context;
}

void kick(self_ptr self, std::size_t w) {
  auto& st = self->state;
  if (w == no_worker || w >= st.workers.size()) return;
  auto& slot = st.workers[w];
  if (!slot.alive || slot.steps >= (st.opts.pipelined ? max_worker_steps : 1)) return;
  std::vector<batch_candidate> cands;
  for (const auto& [id, s] : st.seqs) {
    if (s.worker != w || s.awaiting_plan || s.reserving || s.ended) continue;
    if (s.in_step == 0)
      cands.push_back({id, s.phase, s.phase == seq_phase::prefill ? std::int64_t(s.req.prompt.size()) : 1, s.arrival});
    else if (can_queue_ahead(st, s))
      cands.push_back({id, seq_phase::decode, 1, s.arrival});
  }
  if (cands.empty()) return;
  const batch_plan plan = (*st.former)(cands);
  if (plan.step.empty()) return;
  step_request req;
  req.step = st.next_step++;
  req.entries.reserve(plan.step.size());
  std::vector<std::uint64_t> ids;
  for (const auto& c : plan.step) {
    sequence& s = st.seqs.at(c.seq);
    step_entry e;
    e.seq = s.id;
    e.pick = s.pick;
    e.sampling = s.req.sampling;
    if (s.in_step > 0) {
      e.phase = seq_phase::decode;
      e.pos0 = s.pos_ahead;
      e.sampled_token = true;
    } else {
      e.phase = s.phase;
      e.pos0 = s.cache_length;
      if (s.phase == seq_phase::prefill)
        e.tokens = s.req.prompt;
      else
        e.tokens.assign(1, s.next_token);
      e.fetched = std::move(s.fetched);
      s.fetched.clear();
    }
    s.pos_ahead = e.pos0 + (e.sampled_token ? 1 : std::int64_t(e.tokens.size()));
    ++s.in_step;
    ids.push_back(s.id);
    req.entries.push_back(std::move(e));
  }
  if (slot.steps > 0) ++st.stats.steps_queued_ahead;
  ++slot.steps;
  const double sent_us = trace_now_us();
  self->request(slot.actor, st.opts.step_timeout, step_atom_v, std::move(req))
      .then([self, w, sent_us](step_result& res) { on_step_result(self, w, sent_us, res); },
            [self, w, ids](caf::error& e) {
              auto& st = self->state;
              --st.workers[w].steps;
              // A timeout or a dead worker: the worker is lost; its other
              // sequences cannot be trusted to progress either.
              lose_worker(self, w, "failed during a step: " + describe(e));
              for (const auto id : ids) fail(self, id, make_pipeline_error(pipeline_errc::worker_failed, describe(e)));
            });
  // A step queued ahead needs no wake: the worker starts it as soon as the
  // running one is done.
  if (slot.steps < max_worker_steps) kick(self, w);
}

caf::error validate(const scheduler_state& st, std::uint64_t id, const generation_request& req) {
  auto bad = [&](const std::string& what) {
    return make_pipeline_error(pipeline_errc::invalid_request, "request " + std::to_string(id) + ": " + what);
  };
  if (st.seqs.count(id)) return bad("id is already in use by a running request");
  if (st.used_ids.count(id)) return bad("id was used by an earlier request (ids are unique per scheduler)");
  if (req.prompt.empty()) return bad("prompt: is empty (nothing to condition on)");
  for (std::size_t i = 0; i < req.prompt.size(); ++i)
    if (req.prompt[i] < 0 || req.prompt[i] >= st.opts.vocab_size)
      return bad("prompt: token " + std::to_string(i) + " has id " + std::to_string(req.prompt[i]) +
                 ", outside the vocabulary of " + std::to_string(st.opts.vocab_size));
  if (std::int64_t(req.prompt.size()) > st.opts.max_context)
    return bad("prompt: " + std::to_string(req.prompt.size()) + " tokens do not fit the context of " +
               std::to_string(st.opts.max_context) + " tokens");
  if (req.max_tokens < 0) return bad("max_tokens: must be >= 0");
  return {};
}

scheduler_actor::behavior_type scheduler_behavior(self_ptr self, scheduler_options opts) {
  auto& st = self->state;
  st.former = std::make_unique<batch_former>(opts.capacity, opts.policy);
  for (const auto& w : opts.workers) {
    st.workers.push_back({w, true, 0, 0});
    self->monitor(w);
  }
  st.opts = std::move(opts);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    for (std::size_t w = 0; w < st.workers.size(); ++w)
      if (st.workers[w].actor.address() == dm.source)
        lose_worker(self, w, "exited (" + caf::to_string(dm.reason) + ")");
  });
  return {
      [self](generate_atom, std::uint64_t id, generation_request& req,
             caf::actor sink) -> caf::result<generation_result> {
        auto& st = self->state;
        if (auto err = validate(st, id, req)) {
          ++st.stats.requests_failed;
          return err;
        }
        std::shared_ptr<token_picker> pick;
        try {
          pick = std::make_shared<token_picker>(st.opts.make_picker(req.sampling));
        } catch (const std::exception& e) {
          ++st.stats.requests_failed;
          return make_pipeline_error(pipeline_errc::invalid_request, "request " + std::to_string(id) + ": " + e.what());
        }
        st.used_ids.insert(id);
        sequence s{id, std::move(req), std::move(sink), self->make_response_promise<generation_result>(),
                   no_worker, seq_phase::prefill, st.next_arrival++, std::move(pick),
                   text_stream({}, st.opts.detokenize)};
        s.text = text_stream(s.req.stop, st.opts.detokenize);
        s.res.prompt_tokens = std::int64_t(s.req.prompt.size());
        auto promise = s.promise;
        st.seqs.emplace(id, std::move(s));
        st.pending.push_back(id);
        seat_pending(self);
        return promise;
      },
      [self](cancel_atom, std::uint64_t id) -> bool {
        if (!self->state.seqs.count(id)) return false;
        fail_and_reseat(self, id,
                        make_pipeline_error(pipeline_errc::cancelled, "request " + std::to_string(id) + ": cancelled"));
        return true;
      },
      [self](stats_atom) { return self->state.stats; },
  };
}

}  // namespace

scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_options opts) {
  if (opts.workers.empty()) throw std::invalid_argument("scheduler: no workers given");
  if (!opts.store) throw std::invalid_argument("scheduler: no kv store given");
  if (!opts.detokenize || !opts.make_picker) throw std::invalid_argument("scheduler: detokenize and make_picker are required");
  if (opts.max_context <= 0 || opts.vocab_size <= 0)
    throw std::invalid_argument("scheduler: max_context and vocab_size must be > 0");
  return sys.spawn(scheduler_behavior, std::move(opts));
}

}  // namespace specpipe
