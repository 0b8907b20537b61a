#pragma once
// Token embedding lookup: out[t] = table[ids[t]] widened to f32.
#include <cstdint>

#include "memory/dtype.hpp"

namespace specpipe::kernels::cpu {

// table: [vocab, dim] in t_type (f32/f16/bf16), row stride `dim`; out: [n, dim].
// Checks every id first and throws std::out_of_range naming the first bad one
// (its index in `ids`, its value and the vocabulary size), writing nothing.
void embedding(const std::int32_t* ids, std::int64_t n, const void* table, dtype t_type,
               std::int64_t vocab, std::int64_t dim, float* out);

}  // namespace specpipe::kernels::cpu
