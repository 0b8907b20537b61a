#include "actors/kv_rows_pack.hpp"

#include "memory/dtype.hpp"

namespace specpipe {

std::shared_ptr<const kv_rows> pack_kv_rows(seq_id seq, std::int64_t pos0, std::int64_t n, int n_kv_heads,
                                            std::int64_t head_dim, std::span<const float* const> k,
                                            std::span<const float* const> v) {
  auto r = std::make_shared<kv_rows>();
  const int layers = int(k.size());
  r->seq = seq;
  r->pos0 = pos0;
  r->n_tokens = n;
  r->n_layers = layers;
  r->n_kv_heads = n_kv_heads;
  r->row_bytes = std::size_t(head_dim) * 2 * sizeof(std::uint16_t);
  r->data.resize(std::size_t(n) * std::size_t(layers) * std::size_t(n_kv_heads) * r->row_bytes);
  auto* dst = reinterpret_cast<std::uint16_t*>(r->data.data());
  for (std::int64_t t = 0; t < n; ++t)
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < n_kv_heads; ++h) {
        const std::int64_t at = (t * n_kv_heads + h) * head_dim;
        for (std::int64_t d = 0; d < head_dim; ++d) *dst++ = f32_to_f16(k[std::size_t(l)][at + d]);
        for (std::int64_t d = 0; d < head_dim; ++d) *dst++ = f32_to_f16(v[std::size_t(l)][at + d]);
      }
  return r;
}

}  // namespace specpipe
