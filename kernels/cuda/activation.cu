// SwiGLU over the fused [gate | up] projection output, 8 elements (16 bytes)
// per thread when the sizes allow it.
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda {
namespace {

using detail::bf16;

using detail::silu;

__global__ void swiglu_vec_kernel(const bf16* gu, std::int64_t ld_gu, bf16* out, std::int64_t ld_out,
                                  std::int64_t inter) {
  detail::grid_dependency_wait();
  detail::allow_dependent_launch();
  const std::int64_t r = blockIdx.y;
  const std::int64_t c = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (c >= inter) return;
  const uint4 g = *reinterpret_cast<const uint4*>(gu + r * ld_gu + c);
  const uint4 u = *reinterpret_cast<const uint4*>(gu + r * ld_gu + inter + c);
  float gf[8], uf[8], o[8];
  detail::bf16x8_to_f32(g, gf);
  detail::bf16x8_to_f32(u, uf);
#pragma unroll
  for (int i = 0; i < 8; ++i) o[i] = silu(gf[i]) * uf[i];
  *reinterpret_cast<uint4*>(out + r * ld_out + c) = detail::f32_to_bf16x8(o);
}

__global__ void swiglu_scalar_kernel(const bf16* gu, std::int64_t ld_gu, bf16* out,
                                     std::int64_t ld_out, std::int64_t inter) {
  detail::grid_dependency_wait();
  detail::allow_dependent_launch();
  const std::int64_t r = blockIdx.y;
  const std::int64_t c = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= inter) return;
  const float g = __bfloat162float(gu[r * ld_gu + c]);
  const float u = __bfloat162float(gu[r * ld_gu + inter + c]);
  out[r * ld_out + c] = __float2bfloat16(silu(g) * u);
}

}  // namespace

void swiglu(const std::uint16_t* gu, std::int64_t ld_gu, std::uint16_t* out, std::int64_t ld_out,
            std::int64_t rows, std::int64_t inter, stream_t s, bool dependent) {
  if (rows <= 0 || inter <= 0) return;
  const auto* g = reinterpret_cast<const bf16*>(gu);
  auto* o = reinterpret_cast<bf16*>(out);
  const bool vec = inter % 8 == 0 && ld_gu % 8 == 0 && ld_out % 8 == 0 &&
                   reinterpret_cast<std::uintptr_t>(gu) % 16 == 0 &&
                   reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
  constexpr unsigned threads = 256;
  if (vec) {
    const dim3 grid(unsigned((inter / 8 + threads - 1) / threads), unsigned(rows));
    detail::launch_kernel(swiglu_vec_kernel, grid, dim3(threads), 0, as_stream(s), dependent, g, ld_gu, o, ld_out,
                          inter);
  } else {
    const dim3 grid(unsigned((inter + threads - 1) / threads), unsigned(rows));
    detail::launch_kernel(swiglu_scalar_kernel, grid, dim3(threads), 0, as_stream(s), dependent, g, ld_gu, o,
                          ld_out, inter);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda
