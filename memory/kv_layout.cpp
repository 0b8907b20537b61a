#include "memory/kv_layout.hpp"

#include <algorithm>
#include <stdexcept>

namespace specpipe {

const char* kv_format_name(kv_format f) {
  switch (f) {
    case kv_format::full: return "full";
    case kv_format::kivi: return "kivi";
    case kv_format::specache: return "specache";
    case kv_format::hier: return "hier";
  }
  return "?";
}

kv_layout kv_layout::make(kv_format format, int bits, std::int64_t head_dim, std::int64_t group,
                          std::int64_t n_kv_heads, std::int64_t n_layers) {
  const std::string what = std::string("kv_layout(") + kv_format_name(format) + "): ";
  if (format == kv_format::full) throw std::invalid_argument(what + "the full format has no packed layout");
  if (format == kv_format::kivi && bits != 1 && bits != 2 && bits != 4)
    throw std::invalid_argument(what + "bits must be 1, 2 or 4, got " + std::to_string(bits));
  if (format == kv_format::specache && bits != 1)
    throw std::invalid_argument(what + "bits must be 1 (SpeCache's quartile levels are 1-bit), got " +
                                std::to_string(bits));
  if (format == kv_format::hier && bits != 4)
    throw std::invalid_argument(what + "bits per plane must be 4, got " + std::to_string(bits));
  if (group <= 0 || group % 8 != 0)
    throw std::invalid_argument(what + "group must be a positive multiple of 8 (a channel's G codes fill "
                                "whole bytes), got " + std::to_string(group));
  if (head_dim <= 0 || n_kv_heads <= 0 || n_layers <= 0)
    throw std::invalid_argument(what + "head_dim, n_kv_heads and n_layers must be positive, got " +
                                std::to_string(head_dim) + ", " + std::to_string(n_kv_heads) + ", " +
                                std::to_string(n_layers));
  kv_layout l;
  l.format = format;
  l.bits = bits;
  l.head_dim = head_dim;
  l.group = group;
  l.value_group = std::min(group, head_dim);
  l.n_kv_heads = n_kv_heads;
  l.n_layers = n_layers;
  return l;
}

std::int64_t kv_layout::key_group_bytes() const {
  return planes() * key_block_bytes() + head_dim * 2 * std::int64_t(sizeof(std::uint16_t));
}

std::int64_t kv_layout::value_token_bytes() const {
  return planes() * value_row_bytes() + value_groups() * 2 * std::int64_t(sizeof(std::uint16_t));
}

std::size_t kv_layout::bytes(std::int64_t quantized, std::int64_t window, std::int64_t window_elem_bytes) const {
  if (quantized < 0 || window < 0 || quantized % group != 0)
    throw std::invalid_argument("kv_layout::bytes: quantized tokens " + std::to_string(quantized) +
                                " must be a non-negative multiple of the group " + std::to_string(group));
  const std::int64_t per_head = quantized / group * key_group_bytes() + quantized * value_token_bytes() +
                                window * head_dim * 2 * window_elem_bytes;
  return std::size_t(per_head) * std::size_t(n_kv_heads) * std::size_t(n_layers);
}

std::int64_t quantized_tokens(std::int64_t tokens, std::int64_t group, std::int64_t flush_at) {
  // Before the last append the window held tokens - 1 - q rows, and flushing
  // (G at a time) stopped as soon as it held fewer than flush_at: q is the
  // smallest multiple of G with tokens - 1 - q < flush_at.
  if (tokens <= 1) return 0;
  const std::int64_t before = tokens - 1;
  if (before < flush_at) return 0;
  return ((before - flush_at) / group + 1) * group;
}

std::size_t fp16_bytes(std::int64_t tokens, std::int64_t head_dim, std::int64_t n_kv_heads, std::int64_t n_layers) {
  return std::size_t(tokens) * std::size_t(head_dim) * 2 * 2 * std::size_t(n_kv_heads) * std::size_t(n_layers);
}

}  // namespace specpipe
