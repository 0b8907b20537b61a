#pragma once
// The host KV store: owns the pinned arena (make_pinned_allocator(): page-
// locked and GPU-mapped when a GPU is present) laid out by kv_block_table.
// Appends rows, resolves (sequence, layer, head, position) to arena rows for
// the transfer engine, frees sequences, reports usage. The arena is allocated
// once, up to the budget, and freed when the actor exits.
#include <cstddef>
#include <cstdint>

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/tracer.hpp"
#include "actors/type_ids.hpp"
#include "memory/allocator.hpp"

namespace specpipe {

using kv_store_actor = caf::typed_actor<
    // Takes blocks for `tokens` tokens of the sequence from the budget now,
    // so its appends up to that length cannot be refused. Refuses with
    // store_exhausted (naming the sequence, need and budget).
    caf::replies_to<reserve_atom, seq_id, std::int64_t>::with<kv_usage>,
    // Refuses with store_exhausted when the rows go beyond the sequence's
    // reservation and the budget cannot hold them.
    caf::replies_to<append_atom, kv_append>::with<kv_usage>,
    // Rows for a gather, under a lease the engine returns with unpin.
    caf::replies_to<resolve_atom, seq_id, std::vector<topk_selection>>::with<gather_source>,
    caf::reacts_to<unpin_atom, std::uint64_t>,
    // Frees rows and reservation. Blocks still under a lease are returned
    // when the lease is.
    caf::replies_to<free_atom, seq_id>::with<kv_usage>,
    caf::replies_to<usage_atom>::with<kv_usage>>;

struct kv_store_options {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;                // a row is K then V, f16: 4 * head_dim bytes
  std::int64_t block_tokens = 16;
  std::size_t budget_bytes = 0;    // rounded down to whole blocks
  // Host pages behind the arena (GPU builds); huge pages cut the address
  // translations a scattered gather pays (kernels/cuda/NOTES.md, "Sparse
  // gather"). Falls back to the driver's pages when refused.
  pinned_pages pages = pinned_pages::driver;
};

kv_store_actor spawn_kv_store(caf::actor_system& sys, const kv_store_options& opts, trace_sink trace = {});

// Bytes of one row and one block for these options.
std::size_t kv_row_bytes(const kv_store_options& opts);
std::size_t kv_block_bytes(const kv_store_options& opts);

}  // namespace specpipe
