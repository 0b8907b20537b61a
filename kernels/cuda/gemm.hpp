#pragma once
// y = x W^T (+ y) with bf16 inputs and f32 accumulation: x [m, k] (row stride
// ldx), W [n, k] (HF's out_features x in_features, row stride ldw), y [m, n]
// (row stride ldy) in bf16 or f32. With accumulate, y (f32 only) is added to:
// the residual add fused into the projection's epilogue.
#include <cstdint>

#include "kernels/cuda/cuda_error.hpp"

namespace specpipe::kernels::cuda {

enum class gemm_out : std::uint8_t { bf16, f32 };

struct gemm_args {
  const std::uint16_t* x = nullptr;
  std::int64_t ldx = 0;
  const std::uint16_t* w = nullptr;
  std::int64_t ldw = 0;
  void* y = nullptr;
  std::int64_t ldy = 0;
  gemm_out out = gemm_out::bf16;
  bool accumulate = false;
  std::int64_t m = 0, n = 0, k = 0;
};

enum class gemm_impl : std::uint8_t {
  automatic,  // gemv for m <= gemv_max_rows when its layout rules hold, else cuBLAS
  cublas,
  gemv,
};

constexpr std::int64_t gemv_max_rows = 8;

// True when the GEMV kernel can run these arguments: m <= gemv_max_rows,
// k, ldx, ldw multiples of 8 and x, W 16-byte aligned.
bool gemv_supported(const gemm_args& a);

// cuBLAS (cublasGemmEx, CUBLAS_COMPUTE_32F). Sets the handle's stream to s.
void gemm_cublas(blas_handle_t h, const gemm_args& a, stream_t s);
// The bandwidth-bound decode GEMV: each warp streams two rows of W with
// 16-byte loads and serves all m inputs from them. Throws when unsupported.
void gemv(const gemm_args& a, stream_t s);
void gemm(blas_handle_t h, const gemm_args& a, stream_t s, gemm_impl impl = gemm_impl::automatic);

}  // namespace specpipe::kernels::cuda
