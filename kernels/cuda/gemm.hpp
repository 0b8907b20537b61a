#pragma once
// y = x W^T (+ y) with bf16 inputs and f32 accumulation: x [m, k] (row stride
// ldx), W [n, k] (HF's out_features x in_features, row stride ldw), y [m, n]
// (row stride ldy) in bf16 or f32. With accumulate, y (f32 only) is added to:
// the residual add fused into the projection's epilogue.
#include <cstdint>

#include "kernels/cuda/cuda_error.hpp"

namespace specpipe::kernels::cuda {

// swiglu (GEMV only): W = [Wg; Wu] stacked (n = 2 * inter rows) and y is
// [m, inter] bf16 = silu(g) * u, g and u the two halves of x W^T each rounded
// to bf16 first: bit for bit what the bf16 projection followed by the SwiGLU
// kernel writes, without the kernel and the round trip of [m, 2 * inter]. A
// warp reads gate row r and up row r + inter, so nothing is recomputed.
enum class gemm_out : std::uint8_t { bf16, f32, swiglu };

// v1's depth (kernels/cuda/NOTES.md, version 3: v2's 4 was measured no
// faster on the whole-row shapes and costs a third of the resident warps).
constexpr int gemv_default_unroll = 2;

struct gemm_args {
  const std::uint16_t* x = nullptr;
  std::int64_t ldx = 0;
  const std::uint16_t* w = nullptr;
  std::int64_t ldw = 0;
  void* y = nullptr;
  std::int64_t ldy = 0;
  gemm_out out = gemm_out::bf16;
  bool accumulate = false;
  // GEMV only: launch as a programmatic dependent (CUDA PDL) of the previous
  // kernel on the stream, so that its blocks start streaming W (which no
  // earlier kernel writes) while that kernel drains; x and y are touched only
  // after griddepcontrol.wait.
  bool overlap_launch = false;
  // GEMV only: let up to 8 warps of a block share a row pair, each over its
  // own slice of k (v2, gemv_k_split); false keeps v1's shape, one warp per
  // row pair over the whole of k.
  bool k_split = true;
  // GEMV only: 16-byte loads per row in flight per lane, 2 (v1) or 4 (v2).
  // More loads per warp cost registers and so resident warps (ptxas, M = 1:
  // 40 registers and 6 blocks of 8 warps per SM at 2, 60 and 4 blocks at 4).
  int unroll = gemv_default_unroll;
  std::int64_t m = 0, n = 0, k = 0;
};

enum class gemm_impl : std::uint8_t {
  automatic,  // gemv_preferred(m) and gemv_supported: GEMV, else cuBLAS
  cublas,
  gemv,
};

constexpr std::int64_t gemv_max_rows = 8;

// The dispatch rule of gemm_impl::automatic, by measured speed (H200, bf16,
// llama3-8b shapes, kernels/cuda/NOTES.md "GEMV v1"): at m = 1 the own GEMV
// beat cuBLAS on every shape (6144x4096 61% vs 44% of copy bandwidth,
// 28672x4096 90% vs 82%, 4096x14336 80% vs 66%, 128256x4096 106% vs 100%); at
// m = 8 cuBLAS won on every shape (47/82/66/99% vs 27/45/23/54%). m = 2 costs
// the GEMV twice the FMAs of m = 1 on the same W bytes, far from its m = 8
// compute limit, so it stays on the GEMV (`bench --kernels` prints m = 2 and 4
// for both to confirm); m >= 3 goes to cuBLAS.
constexpr std::int64_t gemv_preferred_max_rows = 2;
constexpr bool gemv_preferred(std::int64_t m) { return m >= 1 && m <= gemv_preferred_max_rows; }

// True when the GEMV kernel can run these arguments: m <= gemv_max_rows,
// k, ldx, ldw multiples of 8 and x, W 16-byte aligned.
bool gemv_supported(const gemm_args& a);

// The implementation gemm(h, a, s, impl) runs for these arguments.
gemm_impl gemm_resolve(const gemm_args& a, gemm_impl impl);

// cuBLAS (cublasGemmEx, bf16 tensor cores with CUBLAS_COMPUTE_32F). Sets the
// handle's stream to s. Throws for gemm_out::swiglu.
void gemm_cublas(blas_handle_t h, const gemm_args& a, stream_t s);
// The bandwidth-bound decode GEMV: each warp streams two rows of W (over a
// slice of k when the rows alone cannot fill the machine) with 16-byte loads
// and serves all m inputs from them. Throws when unsupported.
void gemv(const gemm_args& a, stream_t s);
void gemm(blas_handle_t h, const gemm_args& a, stream_t s, gemm_impl impl = gemm_impl::automatic);

// GEMV plan: warps of a block that share one pair of rows, each over its own
// slice of k (1, 2, 4 or 8). Chosen so that the grid stays within one wave of
// resident blocks (occupancy of the instantiation on this device).
int gemv_k_split(std::int64_t n, std::int64_t k, int resident_blocks);

// The k-split gemv(a, s) launches with on the current device: gemv_k_split
// of the instantiation's occupancy, or 1 without a.k_split. Throws when the
// GEMV cannot run `a`.
int gemv_planned_k_split(const gemm_args& a);
// Resident blocks (SMs x blocks per SM) of the instantiation gemv(a, s)
// runs, from the occupancy query: reported by the benchmark beside its time.
int gemv_resident_blocks(const gemm_args& a);

}  // namespace specpipe::kernels::cuda
