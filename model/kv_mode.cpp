#include "model/kv_mode.hpp"

#include <stdexcept>

#include "model/forward.hpp"
#include "model/hier_cache.hpp"
#include "model/kivi_cache.hpp"

namespace specpipe {

std::string kv_mode::describe() const {
  switch (format) {
    case kv_format::full: return "full (f32)";
    case kv_format::kivi:
      return "kivi " + std::to_string(bits) + "-bit G=" + std::to_string(group) + " R=" + std::to_string(residual);
    case kv_format::specache:
      return "specache " + std::to_string(bits) + "-bit G=" + std::to_string(group) + " R=" + std::to_string(residual) +
             " k=" + std::to_string(topk) + (prefetch == specache_prefetch::output ? " prefetch=output" : "");
    case kv_format::hier: return "hier INT" + std::to_string(bits) + " G=" + std::to_string(group);
  }
  return "?";
}

kv_layout kv_mode::layout(const model_config& c) const {
  const int plane_bits = format == kv_format::hier ? 4 : bits;
  // SpeCache's 2-bit copy is plain KIVI 2-bit; its 1-bit one has its own levels.
  const kv_format f = format == kv_format::specache && bits == 2 ? kv_format::kivi : format;
  return kv_layout::make(f, plane_bits, c.head_dim, group, c.num_key_value_heads, c.num_hidden_layers);
}

std::int64_t kv_mode::flush_at() const { return format == kv_format::hier ? 2 * group : residual + group; }

kv_mode parse_kv_mode(std::string_view kind, int bits, std::int64_t group, std::int64_t residual) {
  kv_mode m;
  const std::string k(kind);
  if (bits < 0) throw std::invalid_argument("--kv-bits: must be positive, got " + std::to_string(bits));
  if (group < 0) throw std::invalid_argument("--group: must be positive, got " + std::to_string(group));
  if (residual < 0) throw std::invalid_argument("--residual: must be >= 0, got " + std::to_string(residual));
  if (k == "full") {
    if (bits || group || residual)
      throw std::invalid_argument("--kv full: takes no --kv-bits, --group or --residual");
    return m;
  }
  if (k == "kivi") {
    m.format = kv_format::kivi;
    m.bits = bits ? bits : 2;
    if (m.bits != 1 && m.bits != 2 && m.bits != 4)
      throw std::invalid_argument("--kv-bits: kivi stores 1, 2 or 4 bits, got " + std::to_string(m.bits));
  } else if (k == "specache") {
    m.format = kv_format::specache;
    m.bits = bits ? bits : 1;
    if (m.bits != 1 && m.bits != 2)
      throw std::invalid_argument("--kv-bits: specache keeps a 1-bit (quartile levels) or 2-bit (KIVI) copy, got " +
                                  std::to_string(m.bits));
  } else if (k == "hier") {
    m.format = kv_format::hier;
    m.bits = bits ? bits : 8;
    if (m.bits != 4 && m.bits != 8)
      throw std::invalid_argument("--kv-bits: hier reads 4 (INT4, upper nibbles) or 8 (INT8) bits, got " +
                                  std::to_string(m.bits));
    if (residual)
      throw std::invalid_argument("--residual: hier keeps a 2G double buffer (set it with --group), not a residual "
                                  "window");
  } else {
    throw std::invalid_argument("--kv: '" + k + "' is not one of full, kivi, specache, hier");
  }
  m.group = group ? group : (m.format == kv_format::hier ? 128 : 64);
  if (m.group % 8 != 0)
    throw std::invalid_argument("--group: must be a multiple of 8 (a channel's codes fill whole bytes), got " +
                                std::to_string(m.group));
  if (m.format != kv_format::hier) m.residual = residual ? residual : 64;
  return m;
}

std::unique_ptr<cache_policy> make_kv_cache(const kv_mode& mode, const model_config& config, std::int64_t max_tokens,
                                            kernels::cpu::thread_pool* pool) {
  switch (mode.format) {
    case kv_format::full: return make_full_cache(config, max_tokens, pool);
    case kv_format::kivi:
    case kv_format::specache: {
      kivi_options o;
      o.bits = mode.bits;
      o.variant = mode.format == kv_format::specache && mode.bits == 1 ? kivi_variant::specache : kivi_variant::kivi;
      o.group = mode.group;
      o.residual = mode.residual;
      return std::make_unique<kivi_cache>(config, max_tokens, o, pool);
    }
    case kv_format::hier: {
      hier_options o;
      o.group = mode.group;
      o.read = mode.bits == 4 ? hier_read::int4 : hier_read::int8;
      return std::make_unique<hier_cache>(config, max_tokens, o, pool);
    }
  }
  throw std::invalid_argument("make_kv_cache: unknown format");
}

void set_specache_flags(kv_mode& mode, int topk, std::string_view prefetch) {
  const bool given = topk != 64 || prefetch != "speculative";
  if (mode.format != kv_format::specache) {
    if (given) throw std::invalid_argument("--topk/--prefetch: only --kv specache fetches rows");
    return;
  }
  if (topk < 1) throw std::invalid_argument("--topk: must be >= 1, got " + std::to_string(topk));
  mode.topk = topk;
  if (prefetch == "speculative")
    mode.prefetch = specache_prefetch::speculative;
  else if (prefetch == "output")
    mode.prefetch = specache_prefetch::output;
  else
    throw std::invalid_argument("--prefetch: '" + std::string(prefetch) + "' is not one of speculative, output");
}

specache_config specache_config_of(const kv_mode& mode) {
  if (mode.format != kv_format::specache) throw std::invalid_argument("specache_config_of: not a specache mode");
  specache_config c;
  c.cache.bits = mode.bits;
  c.cache.group = mode.group;
  c.cache.residual = mode.residual;
  c.topk = mode.topk;
  c.prefetch = mode.prefetch;
  return c;
}

cache_factory kv_cache_factory(const kv_mode& mode) {
  return [mode](const model_config& c, std::int64_t max_tokens, kernels::cpu::thread_pool* pool) {
    return make_kv_cache(mode, c, max_tokens, pool);
  };
}

}  // namespace specpipe
