#pragma once
// The KV-cache modes `specpipe eval` compares. `--kv full,kivi:2,hier:8`
// names them, each optionally with its bits ("name:bits"); `--kv-bits` is the
// bits of a mode given without. make_eval_cache is the one place that turns a
// mode into a cache policy, so new modes only need to be added there.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/cache_policy.hpp"
#include "model/config.hpp"

namespace specpipe::kernels::cpu { class thread_pool; }

namespace specpipe::apps {

struct eval_mode {
  std::string name;  // "full", "kivi", ...
  int bits = 0;      // 0 for modes without a bit width (full)
  std::string label() const;  // "full", "kivi:2": how tables and JSON name it
};

// Parses the --kv list. Throws usage_error on empty items, bad bits and
// duplicates; the names themselves are checked by make_eval_cache.
std::vector<eval_mode> parse_eval_modes(const std::string& text, int default_bits);

// A fresh cache for one sequence of up to max_tokens positions. Throws
// usage_error for a mode this build does not know.
std::unique_ptr<cache_policy> make_eval_cache(const eval_mode& mode, const model_config& config,
                                              std::int64_t max_tokens, kernels::cpu::thread_pool* pool = nullptr);

}  // namespace specpipe::apps
