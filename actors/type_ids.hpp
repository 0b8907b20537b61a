#pragma once
// The project's one CAF type-ID block: every atom and message type of the
// pipeline. Atom texts stay within CAF's 10 characters. Plain-data types get
// an inspect overload (they may cross the network one day); types holding
// pointers into host or device memory are local-only
// (CAF_ALLOW_UNSAFE_MESSAGE_TYPE).
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/type_id.hpp>

#include "actors/messages.hpp"
#include "actors/trace_event.hpp"
#include "model/generator.hpp"
#include "model/sampler.hpp"

CAF_BEGIN_TYPE_ID_BLOCK(specpipe, caf::first_custom_type_id)

  // scheduler
  CAF_ADD_ATOM(specpipe, specpipe, generate_atom, "generate")
  CAF_ADD_ATOM(specpipe, specpipe, cancel_atom, "cancel")
  CAF_ADD_ATOM(specpipe, specpipe, delta_atom, "delta")
  CAF_ADD_ATOM(specpipe, specpipe, stats_atom, "stats")
  // worker
  CAF_ADD_ATOM(specpipe, specpipe, step_atom, "step")
  // kv store
  CAF_ADD_ATOM(specpipe, specpipe, reserve_atom, "reserve")
  CAF_ADD_ATOM(specpipe, specpipe, append_atom, "append")
  CAF_ADD_ATOM(specpipe, specpipe, resolve_atom, "resolve")
  CAF_ADD_ATOM(specpipe, specpipe, unpin_atom, "unpin")
  CAF_ADD_ATOM(specpipe, specpipe, free_atom, "free")
  CAF_ADD_ATOM(specpipe, specpipe, usage_atom, "usage")
  // transfer engine, planner
  CAF_ADD_ATOM(specpipe, specpipe, gather_atom, "gather")
  CAF_ADD_ATOM(specpipe, specpipe, plan_atom, "plan")
  CAF_ADD_ATOM(specpipe, specpipe, prefetch_atom, "prefetch")
  CAF_ADD_ATOM(specpipe, specpipe, collect_atom, "collect")
  // tracer
  CAF_ADD_ATOM(specpipe, specpipe, trace_atom, "trace")
  CAF_ADD_ATOM(specpipe, specpipe, flush_atom, "flush")

  CAF_ADD_TYPE_ID(specpipe, (specpipe::sampling_params))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::generation_request))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::generation_result))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::topk_selection))
  CAF_ADD_TYPE_ID(specpipe, (std::vector<specpipe::topk_selection>))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::planner_stats))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::specache_stats))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::kv_usage))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::worker_usage))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::scheduler_stats))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::trace_event))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::kv_append))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::gather_source))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::gather_request))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::fetch_ticket))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::fetch_plan))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::spec_request))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::step_request))
  CAF_ADD_TYPE_ID(specpipe, (specpipe::step_result))

CAF_END_TYPE_ID_BLOCK(specpipe)

// Local-only: shared pointers to rows, staging memory, completion events.
// Trace events stay in the process that records them.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::trace_event)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::kv_append)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::gather_source)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::gather_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::fetch_ticket)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::fetch_plan)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::spec_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::step_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::step_result)

namespace specpipe {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
  return f(caf::meta::type_name("sampling_params"), x.temperature, x.top_p, x.top_k, x.seed);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, generation_request& x) {
  return f(caf::meta::type_name("generation_request"), x.prompt, x.max_tokens, x.sampling, x.stop,
           x.ignore_eos);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, spec_decode_stats& x) {
  return f(caf::meta::type_name("spec_decode_stats"), x.drafts, x.draft_tokens, x.accepted_tokens,
           x.rejections, x.accepted_per_position, x.draft_seconds, x.verify_seconds);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, generation_result& x) {
  return f(caf::meta::type_name("generation_result"), x.tokens, x.text, x.finish_reason, x.prompt_tokens,
           x.prefill_seconds, x.decode_seconds, x.decode_forwards, x.spec);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, topk_selection& x) {
  return f(caf::meta::type_name("topk_selection"), x.layer, x.kv_head, x.positions);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, planner_stats& x) {
  return f(caf::meta::type_name("planner_stats"), x.plans, x.rows, x.bytes, x.failed);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, specache_stats& x) {
  return f(caf::meta::type_name("specache_stats"), x.steps, x.needed, x.hits, x.guesses, x.guess_hits,
           x.rows_fetched, x.bytes_fetched);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_usage& x) {
  return f(caf::meta::type_name("kv_usage"), x.bytes_used, x.bytes_budget, x.blocks_used, x.blocks_total,
           x.sequences, x.tokens, x.leases, x.blocks_reserved);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_usage& x) {
  return f(caf::meta::type_name("worker_usage"), x.worker, x.sequences, x.cache_bytes);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scheduler_stats& x) {
  return f(caf::meta::type_name("scheduler_stats"), x.requests_done, x.requests_failed, x.steps,
           x.decode_steps, x.decode_roundtrip_us, x.decode_compute_us, x.steps_queued_ahead, x.specache);
}

}  // namespace specpipe
