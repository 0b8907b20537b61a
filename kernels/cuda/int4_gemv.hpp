#pragma once
// The draft's decode GEMV over 4-bit weights (kernels/int4_linear.hpp's
// format, byte for byte): y = x W^^T with bf16 activations x [m, k] (row
// stride ldx), packed codes [n][code_stride] and f16 scale/zero [n][groups],
// f32 accumulation, y [m, n] (row stride ldy) in bf16 or f32, optionally added
// to (f32 only). Version 7 reads the same weights repacked into tiles
// (kernels/int4_tiled.hpp). The CPU reference is kernels::cpu::int4_linear.
#include <cstdint>

#include "kernels/cuda/cuda_error.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gemm.hpp"

namespace specpipe::kernels::cuda {

struct int4_gemv_args {
  const std::uint16_t* x = nullptr;  // bf16
  std::int64_t ldx = 0;
  // Versions 1-4: the row layout. Versions 7 and 9: the tiled codes
  // (kernels/int4_tiled.hpp), code_stride unused.
  const std::uint8_t* codes = nullptr;
  std::int64_t code_stride = 0;         // bytes per row
  const std::uint16_t* scale = nullptr;  // f16 [n][groups]; versions 1-4
  const std::uint16_t* zero = nullptr;
  // Versions 7 and 9 only, instead of scale and zero: the tiled f16 (scale, zero)
  // pairs, 8-byte aligned (kernels::cpu::tile_int4 or kernels::cuda::int4_tile).
  const std::uint16_t* scale_zero = nullptr;
  std::int64_t group = 128;
  void* y = nullptr;
  std::int64_t ldy = 0;
  gemm_out out = gemm_out::bf16;
  bool accumulate = false;
  std::int64_t m = 0, n = 0, k = 0;
  // 2 (this struct's default; the model's draft takes
  // int4_gemv_default_version below), 3 and 4: the tensor-core kernel where
  // k and group are multiples of 128 (v2: 4 chunks in flight per warp in
  // registers, v3: 2 and more resident blocks, v4: 3 chunks in flight per
  // warp through shared memory by cp.async), else v1; 1: always v1
  // (CUDA-core FMAs).
  // 7: v2's products over the tiled layout, every warp load one contiguous
  // 512-byte piece; any k and group that are multiples of 32 (no fallback:
  // the layout is v7's only). 9: the tiled layout streamed by the bulk copy
  // engine through shared memory, a persistent grid (int4_gemv_bulk.cu);
  // group 128 on compute capability 9.0+, else it runs v7. The bench times
  // each (--kernels --gemv-only).
  // out = gemm_out::swiglu (v7 only): W is [gate; up], n = 2 x inter rows
  // (inter a multiple of 16), and y [m][inter] (ldy >= inter) gets
  // bf16(silu(g) * u) of the bf16-rounded products, the SwiGLU kernel's
  // result without its launch or the [m][n] intermediate.
  // v7 only: when weight is given, x is not read; the kernel's input is
  // RMSNorm(norm.x) (f32 rows of stride norm.ld, weight f32 [k]) rounded to
  // bf16, bit for bit what kernels::cuda::rmsnorm (no delta) would have
  // written for x: each block forms it in shared memory, so the norm's own
  // launch goes. k and group multiples of 128, k <= int4_gemv_max_norm_k,
  // rows and weight 16-byte aligned.
  struct {
    const float* x = nullptr;
    std::int64_t ld = 0;
    const float* weight = nullptr;
    float eps = 1e-5f;
  } norm;
  // v7 only: the first pair_rows rows of W are stored in RoPE pair order
  // (kernels::cpu::int4_rope_pair_row, heads of pair_head_dim rows, a
  // multiple of 16), as cuda_model::make_draft tiles the qkv weight; y is
  // written in natural order all the same. 0: every row in natural order.
  std::int64_t pair_rows = 0;
  int pair_head_dim = 0;
  // With pair_rows: RoPE and the KV-cache append as the epilogue, the bits
  // kernels::cuda::rope_append gives over the unfused output, without its
  // launch. W is a qkv weight: n = (n_heads + 2 n_kv_heads) head_dim,
  // pair_rows = (n_heads + n_kv_heads) head_dim, head_dim = pair_head_dim,
  // bf16 output. y is left as rope_append leaves the qkv rows (q rotated, k
  // and v as computed) and the cache gets the rotated k and the v rows.
  // rope->slots and positions are y's m rows'; its qkv, ld_qkv, tokens and
  // dependent are not read (y, ldy, m and this struct's dependent are).
  const rope_append_args* rope = nullptr;
  int version = 2;
  bool dependent = false;  // a programmatic dependent launch (kernels/cuda/launch.cuh)
};

constexpr std::int64_t int4_gemv_max_rows = 8;
constexpr std::int64_t int4_gemv_max_norm_k = 8192;  // the normalizing kernel's rows live in shared memory

// The version the model's draft uses unless told otherwise
// (model::cuda_forward_options::int4_gemv_version, cuda_model::make_draft's
// layout): v7, the fastest measured on the H200 (kernels/cuda/NOTES.md,
// "Stop 22"). v9 is opt-in until it has been measured there.
constexpr int int4_gemv_default_version = 7;

// The code layout a version reads: the rows of kernels/int4_linear.hpp
// (1-4) or the tiles of kernels/int4_tiled.hpp (7, 9).
enum class int4_layout : std::uint8_t { rows, tiles };
constexpr int4_layout int4_gemv_layout(int version) {
  return version == 7 || version == 9 ? int4_layout::tiles : int4_layout::rows;
}

// True when the kernel can run these arguments: 1 <= m <= 8; k and group
// multiples of 32 (a lane's 32 codes lie in one group); ldx a multiple of 8;
// x and codes 16-byte aligned; rows: code_stride a multiple of 16 and at
// least k / 2; tiles: k < 2^31 and scale_zero 8-byte aligned.
bool int4_gemv_supported(const int4_gemv_args& a);

// v1: each warp streams two rows of codes with 16-byte loads (32 codes per
// lane, four loads per row in flight), unpacks the nibbles once and serves
// all m inputs from them: y += z * sum(x) + s * sum(x * q) per group. v2
// (k and group multiples of 128): the products on the tensor cores, see
// int4_gemv.cu; v7 the same over the tiled layout. Launches on `s`,
// allocates nothing; throws std::invalid_argument when unsupported or when
// the pointers do not match the version's layout.
void int4_gemv(const int4_gemv_args& a, stream_t s);

}  // namespace specpipe::kernels::cuda
