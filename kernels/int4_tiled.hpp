#pragma once
// The draft's 4-bit weights (kernels/int4_linear.hpp's format) repacked in
// the order the GPU GEMV's lanes read them: int4 GEMV version 7
// (kernels/cuda/int4_gemv.hpp). Same codes, same f16 scales and zeros, moved.
//
// Why. In the row layout every warp load of the tensor-core GEMV touches 16
// weight rows code_stride bytes apart, 64 bytes of each, so DRAM sees small
// requests spread over 16 pages per instruction; v2-v6 stayed at 1.2-1.6 TB/s
// of 4.2 whatever their schedule (kernels/cuda/NOTES.md, "int4 GEMV v4 and
// what ncu says" and after). Here a warp's two loads per 128-column chunk of
// a 16-row tile are each one contiguous 512-byte piece, and a tile's chunks
// follow each other, as Marlin lays out its weights.
//
// Codes. tiles = ceil(out / 16), chunks = ceil(in / 128). tiles * chunks
// blocks of 1024 bytes, tile-major: block (tile, chunk) at byte
// (tile * chunks + chunk) * 1024, so one tile's rows are one contiguous band.
// In a block, half h (512 bytes) holds the tile's rows 8h .. 8h + 7; in a
// half, 16-byte piece L = 4 g + t (g = 0..7, t = 0..3) is what lane L of the
// warp loads: row 16 tile + 8 h + g, four 4-byte words, word i holding the
// 8 columns 128 chunk + 32 i + 8 t + e (e = 0..7): the even columns 0, 2, 4,
// 6 in nibbles 0..3 (bits 0..15), the odd ones in nibbles 4..7, so column e
// sits at nibble e / 2 + 4 (e % 2). Why that order: the kernel turns nibbles
// p and p + 4 of a word into one bf16x2 register with one lop3 (after a shift
// by 4p), and that register pairs columns 2p and 2p + 1, the same two
// columns as x's p-th bf16x2 register, so x enters the MMAs as loaded (the
// row layout's byte order needed four byte permutes per word to pair x to
// columns p and p + 4). Why words, not 32 consecutive columns per lane as v2 reads:
// an mma.m16n8k16 takes its 16 k values 4 from each lane t of a quad; with
// word i of every lane from the same 32 columns, the two MMAs of a word stay
// inside one group for any group that is a multiple of 32, so small groups
// scale per word and need no fallback. Codes of padding rows (>= out) and
// columns (>= in) are 0.
//
// Scales and zeros. f16 [tiles][groups][8][4]: entry (tile, group, g) is
// (scale, zero) of row 16 tile + g, then (scale, zero) of row 16 tile + g + 8,
// the four values lane (g, t) needs for a chunk, in one 8-byte load; a tile's
// scales of one group are 64 contiguous bytes. Padding rows hold +0.
//
// For out a multiple of 16 and in a multiple of 128 the tiled copy takes
// exactly the row layout's bytes (kernels::cpu::int4_bytes).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/host_device.hpp"
#include "kernels/int4_linear.hpp"

namespace specpipe::kernels::cpu {

constexpr std::int64_t int4_tile_rows = 16;
constexpr std::int64_t int4_tile_cols = 128;                                    // columns per chunk
constexpr std::int64_t int4_tile_chunk_bytes = int4_tile_rows * int4_tile_cols / 2;  // 1024

// Bytes of the tiled codes of an [out, in] matrix (padding rows and columns included).
std::int64_t int4_tiled_code_bytes(std::int64_t out, std::int64_t in);
// f16 elements of the tiled scales and zeros.
std::int64_t int4_tiled_scale_zero_size(std::int64_t out, std::int64_t in, std::int64_t group);
// Nibble of the tiled codes holding (row, col): byte nibble / 2, its low
// nibble when nibble is even.
std::int64_t int4_tiled_code_nibble(std::int64_t row, std::int64_t col, std::int64_t in);
// Nibble (0..7) of a word's column e (0..7): e / 2 + 4 (e % 2).
constexpr SPECPIPE_HD int int4_tiled_word_nibble(int e) { return e / 2 + 4 * (e % 2); }
// The RoPE pair order of a qkv weight's q and k rows (int4 GEMV v7's
// int4_gemv_args::pair_rows): stored row i of a head of head_dim rows (a
// multiple of 16) holds natural row int4_rope_pair_row(i, head_dim), so the
// 16 rows of a tile are 8 dims d and their 8 partners d + head_dim / 2, and
// each lane's two C rows (g, g + 8) are one rotated pair: RoPE can be the
// GEMV's epilogue. Stored tile j of a head: dims 8 j .. 8 j + 7, then
// head_dim / 2 + 8 j .. + 7.
constexpr SPECPIPE_HD std::int64_t int4_rope_pair_row(std::int64_t i, std::int64_t head_dim) {
  const std::int64_t head = i / head_dim, w = i - head * head_dim, j = w / 16, r = w % 16;
  return head * head_dim + (r < 8 ? 8 * j + r : head_dim / 2 + 8 * j + r - 8);
}
// Index of (row, group)'s scale in the tiled scales and zeros; its zero follows.
std::int64_t int4_tiled_scale_offset(std::int64_t row, std::int64_t group_index, std::int64_t groups);

// A tiled matrix in host or device memory (not owned).
struct int4_tiled_matrix {
  const std::uint8_t* codes = nullptr;        // int4_tiled_code_bytes(out, in) bytes
  const std::uint16_t* scale_zero = nullptr;  // int4_tiled_scale_zero_size(out, in, group) f16
  std::int64_t out = 0, in = 0, group = 128;

  bool empty() const { return codes == nullptr; }
  std::int64_t groups() const { return (in + group - 1) / group; }
};

// An owning host copy.
struct int4_tiled_weights {
  std::int64_t out = 0, in = 0, group = 128;
  std::vector<std::uint8_t> codes;
  std::vector<std::uint16_t> scale_zero;

  int4_tiled_matrix view() const;
  std::size_t bytes() const { return codes.size() + 2 * scale_zero.size(); }
};

// The tiled copy of a row-layout matrix in host memory. Throws
// std::invalid_argument on a malformed matrix (as int4_linear).
int4_tiled_weights tile_int4(const int4_matrix& m);

// One weight read back from a tiled matrix in host memory: its code, and
// z + s q in f32 as dequantize_int4_row computes it. Throws
// std::invalid_argument when (row, col) lies outside [out, in].
std::uint8_t int4_tiled_code(const int4_tiled_matrix& t, std::int64_t row, std::int64_t col);
float int4_tiled_weight(const int4_tiled_matrix& t, std::int64_t row, std::int64_t col);

}  // namespace specpipe::kernels::cpu
