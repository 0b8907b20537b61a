#pragma once
// Continuous batching: which sequences step together. Each step takes some
// sequences in decode (one token each) and some in prefill (their whole
// prompt), within a capacity of sequences and tokens per step. Pure policy,
// called by the scheduler for each worker whenever that worker is idle.
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "actors/ids.hpp"

namespace specpipe {

enum class seq_phase : std::uint8_t { prefill, decode };

struct batch_candidate {
  seq_id seq = 0;
  seq_phase phase = seq_phase::decode;
  std::int64_t tokens = 1;    // tokens this sequence would run in the step
  std::uint64_t arrival = 0;  // admission order (smaller = older)
};

struct batch_capacity {
  std::int32_t max_sequences = 8;
  std::int64_t max_tokens = 2048;
};

// Running sequences first (oldest first), then prefills in arrival order:
// a new prompt never stalls tokens already streaming (vLLM's default).
struct decode_first {};
// Strict arrival order, prefill or decode alike.
struct arrival_order {};
using batch_policy = std::variant<decode_first, arrival_order>;

struct batch_plan {
  std::vector<batch_candidate> step;     // run now
  std::vector<batch_candidate> waiting;  // did not fit this step
  std::int64_t tokens = 0;               // tokens in `step`
};

class batch_former {
 public:
  explicit batch_former(batch_capacity capacity = {}, batch_policy policy = decode_first{});

  // Takes candidates in policy order while they fit. A prompt that does not
  // fit is still taken when the step holds no prompt yet: a long prompt then
  // runs beside the decodes instead of waiting for as long as any sequence
  // decodes (max_tokens is exceeded by at most one prompt a step).
  [[nodiscard]] batch_plan operator()(std::span<const batch_candidate> candidates) const;

  const batch_capacity& capacity() const { return capacity_; }

 private:
  batch_capacity capacity_;
  batch_policy policy_;
};

}  // namespace specpipe
