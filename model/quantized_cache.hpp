#pragma once
// The machinery kivi_cache and hier_cache share: per layer, a packed low-bit
// part (memory/kv_layout.hpp) for the oldest positions and a full-precision f32
// window for the newest, with attention straight over the codes
// (kernels/quantized_attention.hpp).
//
// Window rule: *before* rows are appended, the oldest G window tokens are
// quantized as long as the window holds at least `flush_at` tokens (KIVI:
// R + G, so R..R+G-1 full-precision tokens remain; QuantSpec: 2G, the double
// buffer). Rows just appended are therefore always attended in full precision
// (KIVI runs prefill attention in full precision, then quantizes), and once
// anything is quantized the window never holds fewer than flush_at - G tokens.
//
// Rollback: truncate(n) works whenever n >= quantized(layer) in every layer
// (it then only shortens the window; nothing is re-quantized) or n == 0
// (clears everything). Dropping the newest flush_at - G tokens always works.
// Otherwise it throws std::invalid_argument and changes nothing.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/quantize.hpp"
#include "kernels/quantized_attention.hpp"
#include "memory/kv_layout.hpp"
#include "model/cache_policy.hpp"
#include "model/config.hpp"

namespace specpipe {

namespace kernels::cpu { class thread_pool; }

class quantized_cache : public cache_policy {
 public:
  std::int64_t length(int layer) const override;
  // Throws std::length_error past max_tokens.
  void append(int layer, const float* k, const float* v, std::int64_t n) override;
  void attend(int layer, const float* q, std::int64_t n, std::int64_t pos0, float* out) override;
  void truncate(std::int64_t n) override;
  // kv_layout::bytes of each layer's (quantized, window) split, f32 window.
  std::size_t bytes_used() const override;

  const kv_layout& layout() const { return layout_; }
  std::int64_t flush_at() const { return flush_at_; }
  std::int64_t max_tokens() const { return max_tokens_; }
  std::int64_t quantized(int layer) const;
  std::int64_t window(int layer) const;
  // The packed part of `layer` (lower planes only when `with_lower`), for
  // kernels such as mixed attention that read the cache directly.
  kernels::cpu::packed_kv packed(int layer, bool with_lower) const;
  // The kernel arguments of attend() for `layer` (lower planes only when
  // `with_lower`): callers that attend differently (SpeCache's mixed rows)
  // start from them.
  kernels::cpu::quantized_attention_args attention_args(int layer, const float* q, std::int64_t n, std::int64_t pos0,
                                                        float* out, bool with_lower) const;
  const float* window_keys(int layer) const;    // [window, n_kv_heads, head_dim]
  const float* window_values(int layer) const;
  // Every stored byte of the packed part of `layer`, in a fixed order (key codes,
  // key lower plane, key scales, key zeros, then the same for values): tests
  // compare it to prove that nothing was re-quantized.
  std::vector<std::uint8_t> packed_bytes(int layer) const;

 protected:
  quantized_cache(const model_config& config, const kv_layout& layout, kernels::cpu::quant_rule rule,
                  std::int64_t flush_at, std::int64_t max_tokens, kernels::cpu::thread_pool* pool, std::string name);
  void set_read_lower(bool on) { read_lower_ = on; }
  bool read_lower() const { return read_lower_; }

 private:
  struct layer_state {
    std::vector<std::uint8_t> k_codes, k_lower, v_codes, v_lower;
    std::vector<std::uint16_t> k_scale, k_zero, v_scale, v_zero;
    std::vector<float> win_k, win_v;
    std::int64_t quantized = 0;
    std::int64_t window = 0;
  };
  layer_state& at(int layer, const char* op);
  const layer_state& at(int layer, const char* op) const;
  // Quantizes window rows row0 .. row0+G-1 as the next packed group.
  void flush_group(layer_state& l, std::int64_t row0);

  std::string name_;
  kv_layout layout_;
  kernels::cpu::quant_rule rule_;
  std::int64_t n_heads_;
  std::int64_t kv_dim_;
  std::int64_t flush_at_;
  std::int64_t max_tokens_;
  kernels::cpu::thread_pool* pool_;
  bool read_lower_ = false;
  std::vector<layer_state> layers_;
};

}  // namespace specpipe
