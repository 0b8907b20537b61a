// Device-side initialization (hash-based uniform values) and dtype conversion
// on upload.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda {
namespace {

using detail::bf16;

unsigned grid_for(std::int64_t n, unsigned threads) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return unsigned(blocks < 65535 * 32 ? blocks : 65535 * 32);
}

template <class T>
__global__ void fill_uniform_kernel(T* dst, std::int64_t n, float lo, float span, std::uint64_t seed) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float v = lo + span * detail::uniform01(seed, std::uint64_t(i));
    if constexpr (std::is_same_v<T, __half>) dst[i] = __float2half_rn(v);
    else if constexpr (sizeof(T) == 2) dst[i] = __float2bfloat16(v);
    else dst[i] = v;
  }
}

__device__ __forceinline__ float load_as_f32(const void* src, int type, std::int64_t i) {
  switch (type) {
    case 0: return static_cast<const float*>(src)[i];
    case 1: return __half2float(static_cast<const __half*>(src)[i]);
    default: return __bfloat162float(static_cast<const bf16*>(src)[i]);
  }
}

template <class T>
__global__ void convert_kernel(const void* src, int type, T* dst, std::int64_t n) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float v = load_as_f32(src, type, i);
    if constexpr (sizeof(T) == 2) dst[i] = __float2bfloat16(v);  // round to nearest even
    else dst[i] = v;
  }
}

void check_type(int t) {
  if (t < 0 || t > 2)
    throw std::invalid_argument("convert: source dtype code " + std::to_string(t) +
                                " is not f32 (0), f16 (1) or bf16 (2)");
}

}  // namespace

void fill_uniform_bf16(std::uint16_t* dst, std::int64_t n, float lo, float hi, std::uint64_t seed,
                       stream_t s) {
  if (n <= 0) return;
  fill_uniform_kernel<<<grid_for(n, 256), 256, 0, as_stream(s)>>>(reinterpret_cast<bf16*>(dst), n,
                                                                  lo, hi - lo, seed);
  CUDA_CHECK_LAUNCH();
}

void fill_uniform_f16(std::uint16_t* dst, std::int64_t n, float lo, float hi, std::uint64_t seed, stream_t s) {
  if (n <= 0) return;
  fill_uniform_kernel<<<grid_for(n, 256), 256, 0, as_stream(s)>>>(reinterpret_cast<__half*>(dst), n, lo, hi - lo,
                                                                  seed);
  CUDA_CHECK_LAUNCH();
}

void fill_uniform_f32(float* dst, std::int64_t n, float lo, float hi, std::uint64_t seed, stream_t s) {
  if (n <= 0) return;
  fill_uniform_kernel<<<grid_for(n, 256), 256, 0, as_stream(s)>>>(dst, n, lo, hi - lo, seed);
  CUDA_CHECK_LAUNCH();
}

void convert_to_bf16(const void* src, int src_dtype, std::uint16_t* dst, std::int64_t n, stream_t s) {
  check_type(src_dtype);
  if (n <= 0) return;
  convert_kernel<<<grid_for(n, 256), 256, 0, as_stream(s)>>>(src, src_dtype,
                                                             reinterpret_cast<bf16*>(dst), n);
  CUDA_CHECK_LAUNCH();
}

void convert_to_f32(const void* src, int src_dtype, float* dst, std::int64_t n, stream_t s) {
  check_type(src_dtype);
  if (n <= 0) return;
  convert_kernel<<<grid_for(n, 256), 256, 0, as_stream(s)>>>(src, src_dtype, dst, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda
