#include "actors/kv_store.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/kv_block_table.hpp"
#include "actors/pipeline_error.hpp"

namespace specpipe {

std::size_t kv_row_bytes(const kv_store_options& o) { return std::size_t(o.head_dim) * 2 * sizeof(std::uint16_t); }
std::size_t kv_block_bytes(const kv_store_options& o) { return kv_row_bytes(o) * std::size_t(o.block_tokens); }

namespace {

// A resolve that names rows still on their way: the worker's planner
// requests for a step can overtake the scheduler's append of the rows
// before them (they come from different actors), so the store answers once
// the append has arrived.
struct waiting_resolve {
  std::vector<topk_selection> selections;
  std::int64_t needs = 0;  // tokens the sequence must hold
  caf::typed_response_promise<gather_source> promise;
};

struct pinned_arena {
  std::unique_ptr<allocator> alloc;  // declared before the memory: freed after it
  buffer mem;
};

struct kv_store_state {
  static inline const char* name = "specpipe.kv_store";
  kv_store_options opts;
  // Shared with every gather under a lease: a gather still running when the
  // store exits (at shutdown) keeps reading valid memory.
  std::shared_ptr<pinned_arena> arena;
  std::unique_ptr<kv_block_table> table;
  std::unordered_map<std::uint64_t, seq_id> leases;
  std::unordered_map<seq_id, std::int64_t> pins;
  std::unordered_set<seq_id> freed_while_pinned;
  std::uint64_t next_lease = 1;
  std::unordered_map<seq_id, std::vector<waiting_resolve>> waiting;
  trace_sink trace;

  // The arena rows of `sel`, under a new lease.
  gather_source resolve(seq_id seq, std::vector<topk_selection> sel) {
    gather_source src;
    src.seq = seq;
    src.base = arena->mem.as<const std::byte>();
    src.keep_alive = arena;
    src.row_bytes = kv_row_bytes(opts);
    for (const auto& s : sel)
      for (const std::int64_t p : s.positions) src.rows.push_back(table->row(seq, s.layer, s.kv_head, p));
    src.selections = std::move(sel);
    src.lease = next_lease++;
    leases[src.lease] = seq;
    ++pins[seq];
    return src;
  }

  // Answers the waiting resolves of `seq` that its rows now cover.
  void wake(seq_id seq) {
    const auto it = waiting.find(seq);
    if (it == waiting.end()) return;
    auto& list = it->second;
    const std::int64_t have = table->length(seq);
    for (auto w = list.begin(); w != list.end();) {
      if (w->needs > have) {
        ++w;
        continue;
      }
      try {
        w->promise.deliver(resolve(seq, std::move(w->selections)));
      } catch (const std::out_of_range& e) {
        w->promise.deliver(
            make_pipeline_error(pipeline_errc::invalid_request, "request " + std::to_string(seq) + ": " + e.what()));
      }
      w = list.erase(w);
    }
    if (list.empty()) waiting.erase(it);
  }

  void fail_waiting(seq_id seq, const std::string& why) {
    const auto it = waiting.find(seq);
    if (it == waiting.end()) return;
    for (auto& w : it->second)
      w.promise.deliver(make_pipeline_error(pipeline_errc::unknown_sequence, "request " + std::to_string(seq) + ": " + why));
    waiting.erase(it);
  }

  kv_usage usage() const {
    const auto u = table->usage();
    return {u.blocks_used * std::int64_t(kv_block_bytes(opts)),
            u.blocks_total * std::int64_t(kv_block_bytes(opts)),
            u.blocks_used, u.blocks_total, u.sequences, u.tokens, std::int64_t(leases.size()), u.blocks_reserved};
  }

  void report() const {
    if (trace) {
      const auto u = usage();
      trace.counter("kv store", "host store", {{"bytes_used", double(u.bytes_used)}});
    }
  }

  void release(seq_id seq) {
    table->free(seq);
    freed_while_pinned.erase(seq);
    pins.erase(seq);
  }
};

// Bytes for people: the store may be a few hundred bytes in a test or many
// GiB in a server.
std::string human_bytes(std::int64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char s[32];
  std::snprintf(s, sizeof s, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return s;
}

// The refusal the scheduler passes on to the client: who, how much was
// asked for, what is free and what the whole budget is.
caf::error exhausted(const kv_store_options& o, const kv_budget_error& e, const std::string& who,
                     const std::string& what) {
  const auto bb = std::int64_t(kv_block_bytes(o));
  return make_pipeline_error(pipeline_errc::store_exhausted,
                             who + ": host KV store exhausted: " + what + " need " +
                                 human_bytes(e.needed_blocks() * bb) + " more (" +
                                 std::to_string(e.needed_blocks()) + " blocks), " +
                                 human_bytes(e.free_blocks() * bb) + " free of the " +
                                 human_bytes(e.total_blocks() * bb) + " budget (" + e.what() + ")");
}

kv_store_actor::behavior_type kv_store_behavior(kv_store_actor::stateful_pointer<kv_store_state> self,
                                                kv_store_options opts, trace_sink trace) {
  auto& st = self->state;
  st.opts = opts;
  st.trace = std::move(trace);
  const std::int64_t blocks = std::int64_t(opts.budget_bytes / kv_block_bytes(opts));
  st.table = std::make_unique<kv_block_table>(
      kv_block_table_config{opts.n_layers, opts.n_kv_heads, opts.block_tokens, blocks});
  st.arena = std::make_shared<pinned_arena>();
  st.arena->alloc = make_pinned_allocator(opts.pages);
  st.arena->mem = buffer(*st.arena->alloc, std::size_t(blocks) * kv_block_bytes(opts));
  return {
      [self](reserve_atom, seq_id seq, std::int64_t tokens) -> caf::result<kv_usage> {
        auto& st = self->state;
        const std::string who = "request " + std::to_string(seq);
        if (tokens < 0)
          return make_pipeline_error(pipeline_errc::invalid_request,
                                     who + ": reserve of " + std::to_string(tokens) + " tokens");
        if (st.freed_while_pinned.count(seq))
          return make_pipeline_error(pipeline_errc::unknown_sequence, who + ": sequence was freed");
        try {
          st.table->reserve(seq, tokens);
        } catch (const kv_budget_error& e) {
          return exhausted(st.opts, e, who,
                           "reserving " + std::to_string(tokens) + " tokens (prompt + max_tokens) would");
        }
        st.report();
        return st.usage();
      },
      [self](append_atom, const kv_append& a) -> caf::result<kv_usage> {
        auto& st = self->state;
        const kv_rows& r = *a.rows;
        const std::string who = "request " + std::to_string(r.seq);
        if (r.n_layers != st.opts.n_layers || r.n_kv_heads != st.opts.n_kv_heads ||
            r.row_bytes != kv_row_bytes(st.opts) ||
            r.data.size() != std::size_t(r.n_tokens) * std::size_t(r.n_layers) * std::size_t(r.n_kv_heads) * r.row_bytes)
          return make_pipeline_error(pipeline_errc::invalid_request,
                                     who + ": kv rows shaped " + std::to_string(r.n_layers) + " layers x " +
                                         std::to_string(r.n_kv_heads) + " heads x " + std::to_string(r.row_bytes) +
                                         " bytes, the store holds " + std::to_string(st.opts.n_layers) + " x " +
                                         std::to_string(st.opts.n_kv_heads) + " x " +
                                         std::to_string(kv_row_bytes(st.opts)));
        if (st.freed_while_pinned.count(r.seq))
          return make_pipeline_error(pipeline_errc::unknown_sequence, who + ": sequence was freed");
        if (r.pos0 != st.table->length(r.seq))
          return make_pipeline_error(pipeline_errc::invalid_request,
                                     who + ": rows start at position " + std::to_string(r.pos0) + " but " +
                                         std::to_string(st.table->length(r.seq)) + " are stored");
        try {
          st.table->append(r.seq, r.n_tokens);
        } catch (const kv_budget_error& e) {
          return exhausted(st.opts, e, who, "appending " + std::to_string(r.n_tokens) + " tokens would");
        }
        auto* base = st.arena->mem.as<std::byte>();
        const std::byte* src = r.data.data();
        for (std::int64_t t = 0; t < r.n_tokens; ++t)
          for (int l = 0; l < r.n_layers; ++l)
            for (int h = 0; h < r.n_kv_heads; ++h, src += r.row_bytes)
              std::memcpy(base + std::size_t(st.table->row(r.seq, l, h, r.pos0 + t)) * r.row_bytes, src, r.row_bytes);
        st.wake(r.seq);
        st.report();
        return st.usage();
      },
      [self](resolve_atom, seq_id seq, std::vector<topk_selection>& sel) -> caf::result<gather_source> {
        auto& st = self->state;
        if (!st.table->contains(seq) || st.freed_while_pinned.count(seq))
          return make_pipeline_error(pipeline_errc::unknown_sequence,
                                     "request " + std::to_string(seq) + ": the host store holds no rows for it");
        std::int64_t needs = 0;
        for (const auto& s : sel)
          for (const std::int64_t p : s.positions) needs = std::max(needs, p + 1);
        if (needs > st.table->length(seq) && needs <= st.table->capacity(seq)) {
          auto rp = self->make_response_promise<gather_source>();
          st.waiting[seq].push_back({std::move(sel), needs, rp});
          return rp;
        }
        try {
          return st.resolve(seq, std::move(sel));
        } catch (const std::out_of_range& e) {
          return make_pipeline_error(pipeline_errc::invalid_request, "request " + std::to_string(seq) + ": " + e.what());
        }
      },
      [self](unpin_atom, std::uint64_t lease) {
        auto& st = self->state;
        const auto it = st.leases.find(lease);
        if (it == st.leases.end()) return;
        const seq_id seq = it->second;
        st.leases.erase(it);
        if (--st.pins[seq] == 0) {
          st.pins.erase(seq);
          if (st.freed_while_pinned.count(seq)) st.release(seq);
        }
        st.report();
      },
      [self](free_atom, seq_id seq) -> kv_usage {
        auto& st = self->state;
        st.fail_waiting(seq, "freed while a gather waited for its rows");
        if (const auto it = st.pins.find(seq); it != st.pins.end() && it->second > 0)
          st.freed_while_pinned.insert(seq);  // a gather still reads it
        else
          st.release(seq);
        st.report();
        return st.usage();
      },
      [self](usage_atom) -> kv_usage { return self->state.usage(); },
  };
}

}  // namespace

kv_store_actor spawn_kv_store(caf::actor_system& sys, const kv_store_options& opts, trace_sink trace) {
  if (opts.n_layers <= 0 || opts.n_kv_heads <= 0 || opts.head_dim <= 0 || opts.block_tokens <= 0)
    throw std::invalid_argument("kv store: layers, heads, head_dim and block_tokens must be > 0");
  return sys.spawn(kv_store_behavior, opts, std::move(trace));
}

}  // namespace specpipe
