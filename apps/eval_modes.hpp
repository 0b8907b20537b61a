#pragma once
// The KV-cache modes `specpipe eval` compares. `--kv full,kivi:2,hier:8`
// names them, each optionally with its bits ("name:bits"); `--kv-bits` is the
// bits of a mode given without. make_eval_session is the one place that turns
// a mode into a decode session, so new modes only need to be added there.
// Besides the --kv formats of generate: `specache-output` (SpeCache with the
// paper's non-speculative output prefetch) and `specache-nofetch` (its low-bit
// copy alone, no 16-bit rows).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/decode_session.hpp"
#include "model/specache_stats.hpp"

namespace specpipe::apps {

struct eval_mode {
  std::string name;  // "full", "kivi", ...
  int bits = 0;      // 0 for modes without a bit width (full)
  std::string label() const;  // "full", "kivi:2": how tables and JSON name it
};

// Parses the --kv list. Throws usage_error on empty items, bad bits and
// duplicates; the names themselves are checked by check_eval_mode.
std::vector<eval_mode> parse_eval_modes(const std::string& text, int default_bits);

// Throws usage_error for a mode this build does not know, so a bad list
// fails before any work.
void check_eval_mode(const eval_mode& mode);

// A fresh session for one sequence of up to max_tokens positions over `fwd`
// (which must outlive it); `topk` is SpeCache's rows per (layer, KV head).
// Throws usage_error for an unknown mode.
std::unique_ptr<decode_session> make_eval_session(const eval_mode& mode, cpu_forward& fwd, std::int64_t max_tokens,
                                                  int topk);

// SpeCache's figures of a session make_eval_session built; null for modes
// that do not fetch rows.
const specache_stats* eval_session_stats(const decode_session& session);

}  // namespace specpipe::apps
