#pragma once
// The packed attention's split merge, launched by packed_attention() after
// its split kernel (packed_combine.cu); internal to kernels/cuda.
#include "kernels/cuda/cuda_error.hpp"
#include "kernels/cuda/packed_attention.hpp"

namespace specpipe::kernels::cuda {

// Merges a.splits partials per (entry, head) into a.out_f32 / a.out_bf16 (and
// a.ml), with v2's combine (a.combine 0) or the staged one (1).
void packed_combine(const packed_attention_args& a, stream_t s);

}  // namespace specpipe::kernels::cuda
