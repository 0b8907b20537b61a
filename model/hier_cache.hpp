#pragma once
// QuantSpec's hierarchical INT4/INT8 KV cache (Tiwari et al. 2025, sec. 4.1;
// DESIGN.md): each group stores a 4-bit upper code U and a 4-bit residual code
// L; the draft reads U alone (INT4), the target U and L (INT8). Keys per
// channel, values per token, G = 128 by default. A full-precision double
// buffer of 2G tokens sits in front: before an append, while it holds 2G
// tokens the oldest G are quantized, so rejected draft tokens are rolled back
// by truncate() without re-quantizing. Rollback depth: any truncate to a
// length >= quantized(layer) works; in particular dropping the newest G
// tokens (n <= G) always does. See model/quantized_cache.hpp.
#include <cstdint>

#include "model/quantized_cache.hpp"

namespace specpipe {

enum class hier_read : std::uint8_t { int4, int8 };

struct hier_options {
  std::int64_t group = 128;  // G, a multiple of 8
  hier_read read = hier_read::int8;
};

class hier_cache final : public quantized_cache {
 public:
  // Throws std::invalid_argument naming the bad option.
  hier_cache(const model_config& config, std::int64_t max_tokens, const hier_options& opts,
             kernels::cpu::thread_pool* pool = nullptr);
  // One cache serves both models: switch between the draft's INT4 and the
  // target's INT8 reads between forwards.
  void set_read(hier_read r);
  hier_read read() const { return read_lower() ? hier_read::int8 : hier_read::int4; }
  std::int64_t group() const { return layout().group; }
};

}  // namespace specpipe
