#pragma once
// One step's new K/V rows in the host store's layout: [token][layer][kv_head]
// [K | V], f16, from the f32 rows a forward appended, per layer
// [token][kv_head][head_dim]. Shared by every CPU step compute.
#include <cstdint>
#include <memory>
#include <span>

#include "actors/messages.hpp"

namespace specpipe {

// k[l] and v[l] point at layer l's first row; n tokens from position pos0.
std::shared_ptr<const kv_rows> pack_kv_rows(seq_id seq, std::int64_t pos0, std::int64_t n, int n_kv_heads,
                                            std::int64_t head_dim, std::span<const float* const> k,
                                            std::span<const float* const> v);

}  // namespace specpipe
