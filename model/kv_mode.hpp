#pragma once
// The KV cache a run uses, as chosen on the command line:
//   --kv full                 f32 rows, exact (the reference)
//   --kv kivi  --kv-bits 1|2|4  KIVI, default 2 bits
//   --kv specache --kv-bits 1|2  SpeCache: a low-bit copy (1 bit: the quartile
//                             levels; 2 bits: KIVI 2-bit) plus 16-bit rows
//                             fetched from the host store, --topk K per layer
//                             and KV head, --prefetch speculative|output
//   --kv hier  --kv-bits 4|8  QuantSpec's hierarchical cache read as INT4 or
//                             INT8, default 8
//   --group G     tokens per key group (kivi/specache: 64, hier: 128)
//   --residual R  full-precision window of kivi/specache (default 64); hier's
//                 window is its 2G double buffer, so --residual is refused there
// Zero for bits, group or residual means "the format's default".
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "memory/kv_layout.hpp"
#include "model/cache_policy.hpp"
#include "model/config.hpp"
#include "model/specache_session.hpp"

namespace specpipe {

namespace kernels::cpu { class thread_pool; }

struct kv_mode {
  kv_format format = kv_format::full;
  int bits = 0;               // kivi: 1/2/4; specache: 1; hier: 4 or 8 (the read)
  std::int64_t group = 0;     // G
  std::int64_t residual = 0;  // R (kivi/specache)
  int topk = 64;              // specache: rows fetched per (layer, KV head)
  specache_prefetch prefetch = specache_prefetch::speculative;

  // The mode reads rows a planner chooses and the host store supplies.
  bool speculative() const { return format == kv_format::specache; }

  // "kivi 2-bit G=64 R=64", for logs.
  std::string describe() const;
  // The packed layout for this model shape (full has none: throws).
  kv_layout layout(const model_config& c) const;
  // Window length at which the cache flushes G tokens (R + G, or 2G).
  std::int64_t flush_at() const;
};

// Parses and validates the flags (0 = not given). Throws std::invalid_argument
// with the flag's name, e.g. "--kv-bits: hier reads 4 or 8 bits, got 2".
kv_mode parse_kv_mode(std::string_view kind, int bits, std::int64_t group, std::int64_t residual);

// Sets specache's --topk and --prefetch ("speculative" or "output"); throws
// std::invalid_argument naming the flag. Other modes refuse a non-default.
void set_specache_flags(kv_mode& mode, int topk, std::string_view prefetch);

// SpeCache's settings for the caches and sessions a specache mode builds.
specache_config specache_config_of(const kv_mode& mode);

// Builds the cache a mode describes (for specache: the low-bit copy alone,
// without any 16-bit rows).
std::unique_ptr<cache_policy> make_kv_cache(const kv_mode& mode, const model_config& config, std::int64_t max_tokens,
                                            kernels::cpu::thread_pool* pool = nullptr);

using cache_factory =
    std::function<std::unique_ptr<cache_policy>(const model_config&, std::int64_t, kernels::cpu::thread_pool*)>;
cache_factory kv_cache_factory(const kv_mode& mode);

}  // namespace specpipe
