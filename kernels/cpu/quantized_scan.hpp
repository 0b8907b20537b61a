#pragma once
// Internal to the CPU backend: the one scan behind quantized_attention and
// mixed_attention (the latter adds replaced rows).
#include "kernels/mixed_attention.hpp"

namespace specpipe::kernels::cpu {

// rows may be null (no replacement). Validates the arguments.
void quantized_scan(const quantized_attention_args& a, const mixed_rows* rows, thread_pool* pool);

}  // namespace specpipe::kernels::cpu
