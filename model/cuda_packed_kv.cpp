#include "model/cuda_packed_kv.hpp"

#include <stdexcept>
#include <string>

namespace specpipe {

std::int64_t groups_due(std::int64_t window, std::int64_t flush_at, std::int64_t group) {
  if (window < flush_at) return 0;
  return (window - flush_at) / group + 1;
}

packed_kv_shape packed_kv_shape::make(const kv_mode& mode, const model_config& c, std::int64_t slots,
                                      std::int64_t max_context, std::int64_t max_append,
                                      std::int64_t staging_tokens) {
  const std::string who = "cuda_forward (--kv " + std::string(kv_format_name(mode.format)) + "): ";
  if (mode.format == kv_format::full) throw std::invalid_argument(who + "the full mode has no packed cache");
  if (mode.group != 32 && mode.group != 64 && mode.group != 128)
    throw std::invalid_argument(who + "--group " + std::to_string(mode.group) +
                                " is not 32, 64 or 128 (the groups the GPU's packed attention reads)");
  if (c.head_dim != 64 && c.head_dim != 128)
    throw std::invalid_argument(who + "head_dim " + std::to_string(c.head_dim) +
                                " is not 64 or 128 (the packed attention's)");
  if (slots < 1 || max_context < 1) throw std::invalid_argument(who + "slots and max_context must be >= 1");
  if (max_append < 1) throw std::invalid_argument(who + "kv_max_append must be >= 1");
  packed_kv_shape s;
  s.layout = mode.layout(c);
  s.slots = slots;
  s.max_context = max_context;
  s.max_groups = (max_context + mode.group - 1) / mode.group;
  s.flush_at = mode.flush_at();
  // At most one group flushed per forward of the short path (see the header).
  s.max_append = max_append < mode.group ? max_append : mode.group;
  s.win_cap = s.flush_at + s.max_append;
  s.staging_tokens = staging_tokens < 0 ? max_context : staging_tokens;
  return s;
}

std::size_t packed_kv_shape::layer_packed_bytes() const {
  const std::size_t planes = std::size_t(layout.planes());
  const std::size_t per_run = planes * std::size_t(k_run() + v_run()) + 2 * 2 * std::size_t(ks_run() + vs_run());
  return per_run * std::size_t(runs());
}

std::size_t packed_kv_shape::layer_window_bytes() const {
  return std::size_t(runs()) * std::size_t(win_cap) * std::size_t(layout.head_dim) * 2 * 2;
}

std::size_t packed_kv_shape::staging_bytes() const {
  return std::size_t(layout.n_layers) * 2 * std::size_t(layout.n_kv_heads) * std::size_t(staging_tokens) *
         std::size_t(layout.head_dim) * 2;
}

std::size_t packed_kv_shape::total_bytes() const {
  return std::size_t(layout.n_layers) * (layer_packed_bytes() + layer_window_bytes()) + staging_bytes();
}

double packed_kv_shape::packed_bytes_per_token() const {
  return (double(layout.key_group_bytes()) / double(layout.group) + double(layout.value_token_bytes())) *
         double(layout.n_kv_heads * layout.n_layers);
}

}  // namespace specpipe
