#include "kernels/mixed_attention.hpp"

#include "kernels/cpu/quantized_scan.hpp"

namespace specpipe::kernels::cpu {

void mixed_attention(const quantized_attention_args& a, const mixed_rows& rows, thread_pool* pool) {
  quantized_scan(a, &rows, pool);
}

}  // namespace specpipe::kernels::cpu
