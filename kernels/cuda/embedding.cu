// Embedding lookup: gathers bf16 rows into the f32 residual stream.
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/elementwise.hpp"

namespace specpipe::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;

__global__ void embedding_kernel(const bf16* embed, std::int64_t vocab, std::int64_t hidden,
                                 const std::int32_t* tokens, float* out, std::int64_t ld_out) {
  const std::int64_t t = blockIdx.x;
  const std::int32_t id = tokens[t];
  float* o = out + t * ld_out;
  const bool ok = id >= 0 && id < vocab;
  const bf16* row = embed + std::int64_t(ok ? id : 0) * hidden;
  for (std::int64_t i = threadIdx.x; i < hidden; i += blockDim.x)
    o[i] = ok ? __bfloat162float(row[i]) : __int_as_float(0x7fc00000);
}

}  // namespace

void embedding(const std::uint16_t* embed, std::int64_t vocab, std::int64_t hidden,
               const std::int32_t* tokens, std::int64_t n, float* out, std::int64_t ld_out,
               stream_t s) {
  if (n <= 0) return;
  embedding_kernel<<<unsigned(n), 256, 0, as_stream(s)>>>(reinterpret_cast<const bf16*>(embed),
                                                          vocab, hidden, tokens, out, ld_out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda
