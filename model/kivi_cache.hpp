#pragma once
// KIVI's asymmetric low-bit KV cache (Liu et al. 2024, sec. 3-4) and SpeCache's
// 1-bit variant with levels at the quartiles (DESIGN.md): keys per channel in
// groups of G tokens, values per token in groups of min(G, head_dim) channels,
// the newest R..R+G-1 tokens in full precision (model/quantized_cache.hpp has
// the window and rollback rules). Defaults G = 64, R = 64 (SpeCache); KIVI's
// own setting is G = 32, R = 128.
#include <cstdint>

#include "model/quantized_cache.hpp"

namespace specpipe {

enum class kivi_variant : std::uint8_t {
  kivi,      // zero = min, scale = (max - min) / (2^b - 1)
  specache,  // 1-bit only: zero = (3 min + max) / 4, scale = (max - min) / 2
};

struct kivi_options {
  int bits = 2;  // 1, 2 or 4 (specache: 1)
  kivi_variant variant = kivi_variant::kivi;
  std::int64_t group = 64;     // G, a multiple of 8
  std::int64_t residual = 64;  // R >= 0
};

class kivi_cache final : public quantized_cache {
 public:
  // Throws std::invalid_argument naming the bad option.
  kivi_cache(const model_config& config, std::int64_t max_tokens, const kivi_options& opts,
             kernels::cpu::thread_pool* pool = nullptr);
  const kivi_options& options() const { return opts_; }

 private:
  kivi_options opts_;
};

}  // namespace specpipe
