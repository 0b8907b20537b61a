#pragma once
// The lane-order packed attention (v4, packed_attention_v4.cu) behind
// packed_attention(): it takes over when packed_cache_view::order is lane;
// and the argument checks both versions share. Internal to kernels/cuda.
#include <cstddef>

#include "kernels/cuda/packed_attention.hpp"

namespace specpipe::kernels::cuda::detail {

// The argument checks v3 and v4 share (packed_attention.cu):
// std::invalid_argument naming the field; returns the GQA group.
int check_packed_attention_args(const packed_attention_args& a);

}  // namespace specpipe::kernels::cuda::detail

namespace specpipe::kernels::cuda::v4 {

// Validates (the shared checks, then head_dim 128) and launches the split
// kernel (not the combine).
void launch(const packed_attention_args& a, stream_t s);
int blocks_per_sm(const packed_attention_args& a);
std::size_t smem_bytes(const packed_attention_args& a);

}  // namespace specpipe::kernels::cuda::v4
