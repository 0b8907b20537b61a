#pragma once
// The lane-order packed attention (v4, packed_attention_v4.cu) behind
// packed_attention(): it takes over when packed_cache_view::order is lane.
// Internal to kernels/cuda.
#include <cstddef>

#include "kernels/cuda/packed_attention.hpp"

namespace specpipe::kernels::cuda::v4 {

// Validates (std::invalid_argument naming what is wrong) and launches the
// split kernel (not the combine).
void launch(const packed_attention_args& a, stream_t s);
int blocks_per_sm(const packed_attention_args& a);
std::size_t smem_bytes(const packed_attention_args& a);

}  // namespace specpipe::kernels::cuda::v4
