#pragma once
// The "lane order" of packed KV codes on the device: the byte order that the
// packed attention v4 (packed_attention_v4.cu) reads with one load per lane
// and no rearrangement. Plain C++ shared by the kernels (compiled by nvcc as
// __host__ __device__), the quantizer that writes the order, and the host
// tests that build fixtures in it (tests/kernels/packed_device_layout.hpp).
//
// Why a second order. The CPU order (memory/kv_layout.hpp) keeps key codes
// channel-major (one channel's G tokens side by side) and value codes
// token-major. An f16x2 register of an MMA operand pairs two indices of the
// contraction: channels for the scores, tokens for P V. The CPU order pairs
// the other axis in both cases, which cost v2/v3 their slot trick, a per-tile
// B preparation and a trip of P through shared memory (NOTES.md, "Packed
// attention v4"). In lane order the codes lie as the MMAs take them:
//
// * Scores S = Q' K^T with Q' (query rows x channels) as A and the key codes
//   as B (k = channels, n = 8 tokens). Lane (g, t) needs, for token g of the
//   n-tile and k-step j, channels (16j + 2t, 16j + 2t + 1) (register b0) and
//   (16j + 8 + 2t, 16j + 9 + 2t) (b1). A token's row (head_dim * b / 8 bytes,
//   the CPU row size) holds four "quad streams", quad t's 32 channels in
//   b 32-bit words: pair i = 2j + h (h = 0: b0, 1: b1).
// * P V computed as O^T = V^T P^T: A = the value codes (m = 16 channels,
//   k = 16 tokens), B = P^T, which is element for element the score MMA's
//   accumulator (lane (g, t) holds row g, tokens 2t, 2t + 1): no shuffle, no
//   shared memory. Lane (g, t) needs, for m-tile j, channel 16j + g (+ 8 for
//   a1, a3) at tokens (2t, 2t + 1) (a0, a1) and (2t + 8, 2t + 9) (a2, a3).
//   Values are stored in blocks of 16 tokens (16 * head_dim * b / 8 bytes,
//   16 CPU rows); lane L = 4g + t owns 2b consecutive words of the block:
//   pair i = 4j + r, r = a-register index.
//
// Pairs inside a word (b bits per code): a word holds 16 / b pairs; slot s
// of a word keeps its lower code at bit 8 (s / (8 / b)) + b (s % (8 / b))
// and its upper code 16 bits above. Slots 0 .. 8/b - 1 therefore sit in
// bytes 0 and 2 at bit offsets p = 0, b, .., 8 - b, the others in bytes 1
// and 3: one AND with (mask << p) | (mask << (p + 16)) (on the word, or on
// the word >> 8) makes an f16x2 of the subnormals 2^(p - 24) code, exact;
// the kernel folds the 2^(p - 24) into the other operand and the result
// (packed_lane_mma.cuh, sub_pair).
//
// Only head_dim 128 (the shapes this runtime serves); other head sizes keep
// the CPU order and the v3 kernel. Code widths: 1, 2 and 4 bits (hier's
// lower plane is a 4-bit plane in the same order as its upper one).
#include <cstdint>

#include "kernels/host_device.hpp"

namespace specpipe::kernels::cuda {

// Byte order of packed codes on the device.
enum class packed_order : std::uint8_t {
  cpu,   // memory/kv_layout.hpp's bytes (every head_dim; packed attention v3)
  lane,  // this file (head_dim 128; packed attention v4)
};

namespace lane_order {

inline constexpr int head_dim = 128;

// Pairs per 32-bit word and per byte lane (slots sharing bytes 0/2 or 1/3).
SPECPIPE_HD constexpr int pairs_per_word(int b) { return 16 / b; }
SPECPIPE_HD constexpr int pairs_per_half(int b) { return 8 / b; }

// Bit offset p of pair i's codes inside their 16-bit halves once the pairs
// of bytes 1 and 3 are shifted down by 8 (the slot s % (8 / b) times b).
SPECPIPE_HD constexpr int pair_shift(int i, int b) { return (i % pairs_per_word(b)) % pairs_per_half(b) * b; }

// Bit offset, from the start of a lane's stream, of pair i's lower (hi = 0)
// or upper (hi = 1) code.
SPECPIPE_HD constexpr int pair_bit(int i, int hi, int b) {
  const int w = i / pairs_per_word(b), s = i % pairs_per_word(b);
  return 32 * w + 8 * (s / pairs_per_half(b)) + 16 * hi + pair_shift(i, b);
}

// A value pair i = 4 j + r (m-tile j, A register r: channel + 8 for r & 1,
// positions + 8 for r >= 2) lies pair_shift(4 j + (r & 1)) + VT bits up, VT
// the same for every j: this VT (what the kernel's P' of positions + 8
// compensates), or -1 where the order had no such split.
SPECPIPE_HD constexpr int value_token_shift(int b) {
  const int vt = pair_shift(2, b) - pair_shift(0, b);
  for (int j = 0; j < 8; ++j)
    for (int c8 = 0; c8 < 2; ++c8)
      if (pair_shift(4 * j + 2 + c8, b) - pair_shift(4 * j + c8, b) != vt) return -1;
  return vt;
}

// Key codes: bit offset of channel c (0 .. 127) within a token's row of
// 16 b bytes.
SPECPIPE_HD constexpr int key_bit(int c, int b) {
  const int j = c / 16, r = c % 16, h = r / 8, t = (r % 8) / 2, hi = r % 2;
  return t * 32 * b + pair_bit(2 * j + h, hi, b);
}

// Value codes: bit offset of (token tau of its 16-token block, channel c)
// within the block of 256 b bytes.
SPECPIPE_HD constexpr int value_bit(int tau, int c, int b) {
  const int j = c / 16, g = c % 8, r0 = (c % 16) / 8;  // c = 16 j + g + 8 r0
  const int r1 = tau / 8, t = (tau % 8) / 2, hi = tau % 2;
  return (4 * g + t) * 64 * b + pair_bit(4 * j + 2 * r1 + r0, hi, b);
}

// Inverse maps, for writers that assemble whole bytes: the key channel of
// code k (bits k b .. k b + b - 1) of byte y of a token's row, and the
// (token of the block) * 128 + channel of code k of byte y of a value block.
SPECPIPE_HD constexpr int key_channel_at(int y, int k, int b) {
  const int t = y / (4 * b), ys = y % (4 * b);
  const int w = ys / 4, beta = ys % 4, hi = beta / 2, sigma = beta % 2;
  const int i = w * pairs_per_word(b) + sigma * pairs_per_half(b) + k;
  const int j = i / 2, h = i % 2;
  return 16 * j + 8 * h + 2 * t + hi;
}
SPECPIPE_HD constexpr int value_at(int y, int k, int b) {
  const int lane = y / (8 * b), ys = y % (8 * b);
  const int g = lane / 4, t = lane % 4;
  const int w = ys / 4, beta = ys % 4, hi = beta / 2, sigma = beta % 2;
  const int i = w * pairs_per_word(b) + sigma * pairs_per_half(b) + k;
  const int j = i / 4, r = i % 4;
  return (2 * t + 8 * (r >> 1) + hi) * head_dim + 16 * j + g + 8 * (r & 1);
}

// Bytes of a token's key row and of a 16-token value block.
SPECPIPE_HD constexpr int key_row_bytes(int b) { return head_dim * b / 8; }
SPECPIPE_HD constexpr int value_block_bytes(int b) { return 16 * head_dim * b / 8; }

// The code at a bit offset of a byte stream (codes never straddle bytes).
SPECPIPE_HD unsigned code_at_bit(const std::uint8_t* p, int bit, int b) {
  return (unsigned(p[bit >> 3]) >> (bit & 7)) & ((1u << b) - 1u);
}

// Key code of (token tau of the run, channel c): `keys` is the run's first
// row (rows of every group follow each other).
SPECPIPE_HD unsigned key_code(const std::uint8_t* keys, std::int64_t tau, int c, int b) {
  return code_at_bit(keys + tau * key_row_bytes(b), key_bit(c, b), b);
}
// Value code of (token tau of the run, channel c): `values` is the run's first block.
SPECPIPE_HD unsigned value_code(const std::uint8_t* values, std::int64_t tau, int c, int b) {
  return code_at_bit(values + (tau / 16) * value_block_bytes(b), value_bit(int(tau % 16), c, b), b);
}

}  // namespace lane_order
}  // namespace specpipe::kernels::cuda
