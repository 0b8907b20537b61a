#pragma once
// The cache slots of one cuda_forward behind a GPU worker: which sequence
// holds which slot, with a compute's own per-sequence State beside it, and
// the free ones. Shared by the GPU step computes (actors/cuda_*_step_compute);
// the caller empties a slot in the forward (truncate) when it starts or
// frees one. Called on the worker's thread only.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/ids.hpp"
#include "model/config.hpp"
#include "model/cuda_forward.hpp"
#include "model/kv_mode.hpp"

namespace specpipe {

template <class State>
class cuda_slot_table {
 public:
  struct entry {
    int slot = 0;
    State state{};
  };

  explicit cuda_slot_table(int count) : count_(count) {
    for (int s = count - 1; s >= 0; --s) free_.push_back(s);
  }

  entry* find(seq_id seq) {
    const auto it = map_.find(seq);
    return it == map_.end() ? nullptr : &it->second;
  }
  // The sequence's entry for a decode step; throws when no prefill ran.
  entry& of(seq_id seq) {
    if (entry* e = find(seq)) return *e;
    throw std::runtime_error("decode step for a sequence without a cache (no prefill ran)");
  }
  // A prefill that starts the sequence afresh: its own slot with the state
  // reset, else a free slot. Throws when none is free.
  entry& start(seq_id seq) {
    if (entry* e = find(seq)) {
      e->state = State{};
      return *e;
    }
    if (free_.empty())
      throw std::runtime_error("all " + std::to_string(count_) + " sequence slots of this GPU worker are in use");
    const int slot = free_.back();
    free_.pop_back();
    return map_.emplace(seq, entry{slot, State{}}).first->second;
  }
  // Frees the sequence's slot and returns it; -1 when it held none.
  int release(seq_id seq) {
    const auto it = map_.find(seq);
    if (it == map_.end()) return -1;
    const int slot = it->second.slot;
    free_.push_back(slot);
    map_.erase(it);
    return slot;
  }
  std::int64_t size() const { return std::int64_t(map_.size()); }

  // Device bytes the sequences' tokens occupy in `fwd`: packed tokens at
  // kv's bytes per token, the others (window or full cache) as bf16 rows.
  std::int64_t cache_bytes(const cuda_forward& fwd, const model_config& config, const kv_mode& kv) const {
    const double packed = cuda_forward::kv_bytes_per_token(config, kv);
    const double rows = double(cuda_forward::kv_bytes_per_token(config));
    double b = 0;
    for (const auto& [seq, e] : map_) {
      const std::int64_t q = fwd.quantized(e.slot), len = fwd.length(e.slot);
      b += double(q) * packed + double(len - q) * rows;
    }
    return std::int64_t(b);
  }

 private:
  int count_;
  std::unordered_map<seq_id, entry> map_;
  std::vector<int> free_;
};

}  // namespace specpipe
