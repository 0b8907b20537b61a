#pragma once
// The cache formats the GPU attention tests run over: each quantization
// rule at its bits, and hier's two reads (INT4: the upper codes alone;
// INT8: both planes).
#include "kernels/quantized_attention.hpp"

namespace specpipe::test {

struct format_case {
  const char* name;
  kernels::cpu::quant_rule rule;
  int bits;
  bool read_lower;  // hier: the INT8 read
};

inline constexpr format_case formats[] = {
    {"kivi1", kernels::cpu::quant_rule::rtn, 1, false},      {"kivi2", kernels::cpu::quant_rule::rtn, 2, false},
    {"kivi4", kernels::cpu::quant_rule::rtn, 4, false},      {"specache1", kernels::cpu::quant_rule::specache, 1, false},
    {"hier_int4", kernels::cpu::quant_rule::hier, 4, false}, {"hier_int8", kernels::cpu::quant_rule::hier, 4, true},
};

}  // namespace specpipe::test
