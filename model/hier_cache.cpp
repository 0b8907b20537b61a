#include "model/hier_cache.hpp"

namespace specpipe {

hier_cache::hier_cache(const model_config& config, std::int64_t max_tokens, const hier_options& opts,
                       kernels::cpu::thread_pool* pool)
    : quantized_cache(config,
                      kv_layout::make(kv_format::hier, 4, config.head_dim, opts.group, config.num_key_value_heads,
                                      config.num_hidden_layers),
                      kernels::cpu::quant_rule::hier, 2 * opts.group, max_tokens, pool, "hier_cache") {
  set_read(opts.read);
}

void hier_cache::set_read(hier_read r) { set_read_lower(r == hier_read::int8); }

}  // namespace specpipe
