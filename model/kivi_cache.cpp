#include "model/kivi_cache.hpp"

#include <stdexcept>
#include <string>

namespace specpipe {
namespace {

kv_layout kivi_layout(const model_config& c, const kivi_options& o) {
  if (o.residual < 0)
    throw std::invalid_argument("kivi_cache: residual window must be >= 0 tokens, got " + std::to_string(o.residual));
  return kv_layout::make(o.variant == kivi_variant::specache ? kv_format::specache : kv_format::kivi, o.bits,
                         c.head_dim, o.group, c.num_key_value_heads, c.num_hidden_layers);
}

}  // namespace

kivi_cache::kivi_cache(const model_config& config, std::int64_t max_tokens, const kivi_options& opts,
                       kernels::cpu::thread_pool* pool)
    : quantized_cache(config, kivi_layout(config, opts),
                      opts.variant == kivi_variant::specache ? kernels::cpu::quant_rule::specache
                                                             : kernels::cpu::quant_rule::rtn,
                      opts.residual + opts.group, max_tokens, pool,
                      opts.variant == kivi_variant::specache ? "kivi_cache(specache)" : "kivi_cache"),
      opts_(opts) {}

}  // namespace specpipe
