#pragma once
// Where each lane of a warp finds its tensor-core operands in the packed KV
// bytes of memory/kv_layout.hpp, for the packed decode attention
// (packed_attention.cu). Plain C++ shared by the kernel (compiled by nvcc as
// __host__ __device__) and by a host test that emulates the warp's mma.sync
// from these same functions (tests/kernels/packed_fragments_test.cpp).
//
// mma.sync.m16n8k16 (f16 in, f32 accumulate), PTX ISA "matrix fragments":
// lane = 4 g + t (g = groupID 0..7, t = thread in group 0..3);
//   A (16x16): a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9]
//   B (16x8):  b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]
//   D (16x8):  d0 = D[g][2t], d1 = D[g][2t+1], d2 = D[g+8][2t], d3 = D[g+8][2t+1]
// (the lower half of an f16x2 register holds the lower k index).
//
// An f16x2 register always pairs two k indices, but the packed layout pairs
// codes along the "wrong" axis for both products: a key word holds many
// tokens of one channel (QK contracts over channels), a value word many
// channels of one token (PV contracts over tokens). So each k pair carries
// two *slots* j = 0, 1 of the same contraction index, and the N dimension
// separates them: column n = h + 4 j (h a query head of the GQA group, up to
// four per n-tile), with B[2c + jj][h + 4 j] = (jj == j) ? w[h][c] : 0. Then
// D[row][h + 4 j] = sum_c A[row][2c + j] w[h][c]: slot j of each row is its
// own output. Half of B is zero, the price of N = 8 that a GQA group of 4
// pays anyway.
//
// Code extraction (b bits per code, cpw = 32 / b codes per 32-bit word): a
// register takes the codes at positions p and p + cpw/2 of a word, which sit
// at bits b p and 16 + b p: one shift, one AND/OR into the mantissas of two
// f16 1024.0 (0x6400), one HFMA2 to remove the bias. Thread g reads word
// qword(g) of its 32-code run and positions p0(g), p0(g) + 1 (its rows g and
// g + 8). For INT8 (hier, upper + lower plane) the register holds 16 U + L.
#include <cstdint>

#include "kernels/host_device.hpp"

namespace specpipe::kernels::cuda::frag {

// Codes per 32-bit word, and the lanes' word and first position.
SPECPIPE_HD constexpr int codes_per_word(int bits) { return 32 / bits; }
SPECPIPE_HD constexpr int qword(int bits, int g) { return (g * bits) >> 3; }
SPECPIPE_HD constexpr int p0(int bits, int g) { return 2 * (g & ((8 / bits) - 1)); }

// Position (within the 32-code run of a key channel slice, or of a value
// channel block) that register half `j` of row-half `hi` (0: row g, 1: row
// g + 8) of lane group g holds.
SPECPIPE_HD constexpr int run_index(int bits, int g, int hi, int j) {
  return qword(bits, g) * codes_per_word(bits) + p0(bits, g) + hi + j * (codes_per_word(bits) / 2);
}

// Raw f16x2 patterns of the two registers of a lane: 1024 + U and
// 1024 + 2^bits U per half. Convert with to_codes() (device: HFMA2).
struct raw_pair {
  std::uint32_t r0, r1;
};

// (x & m) | c in one instruction (LOP3 with both constants; a C++
// expression with two immediates compiles to two).
SPECPIPE_HD std::uint32_t and_or(std::uint32_t x, std::uint32_t m, std::uint32_t c) {
#if defined(__CUDA_ARCH__)
  std::uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(x), "r"(m), "r"(c));
  return r;
#else
  return (x & m) | c;
#endif
}

SPECPIPE_HD raw_pair extract(std::uint32_t word, int bits, int g) {
  const std::uint32_t x = word >> (bits * p0(bits, g));
  const std::uint32_t m0 = ((1u << bits) - 1u) * 0x00010001u;
  return {and_or(x, m0, 0x64006400u), and_or(x, m0 << bits, 0x64006400u)};
}

// INT8 read of the hierarchical cache: 16 U + L from the upper and lower
// 4-bit planes (same positions), 1024 + (16 U + L) per half, no rescale.
SPECPIPE_HD raw_pair extract_int8(std::uint32_t upper, std::uint32_t lower, int g) {
  const int s = 4 * p0(4, g);
  const std::uint32_t xu = upper >> s, xl = lower >> s;
  return {and_or(xu << 4, 0x00F000F0u, and_or(xl, 0x000F000Fu, 0x64006400u)),
          and_or(xu, 0x00F000F0u, and_or(xl >> 4, 0x000F000Fu, 0x64006400u))};
}

// code = raw * mul + add, exact in f16 (a power-of-two scale of a small
// integer). r0: (1, -1024); r1: (2^-bits, -1024 * 2^-bits); INT8: (1, -1024).
SPECPIPE_HD constexpr float r1_mul(int bits) { return 1.0f / float(1 << bits); }
SPECPIPE_HD constexpr float r1_add(int bits) { return -1024.0f / float(1 << bits); }

// The QK output of a lane: d index e (0..3) of n-tile nt is query head
// 4 nt + head_in_tile(t, e) for the token run_index(bits, g, e >> 1, t >> 1)
// of the warp's 32-token slice.
SPECPIPE_HD constexpr int head_in_tile(int t, int e) { return 2 * (t & 1) + (e & 1); }
SPECPIPE_HD constexpr int slot_of_lane(int t) { return t >> 1; }

// The PV output of a lane: d index e of channel block cb (32 channels) holds
// channel cb * 32 + run_index(bits, g, e >> 1, t >> 1) of head
// 4 nt + head_in_tile(t, e), the same heads as the QK output.
SPECPIPE_HD constexpr int pv_channel(int bits, int g, int t, int cb, int e) {
  return cb * 32 + run_index(bits, g, e >> 1, slot_of_lane(t));
}

// B operands: lane (g, t) supplies k indices 2t, 2t+1 (b0) and 2t+8, 2t+9
// (b1) of column g = h + 4 j: the value w goes to the half of slot j, the
// other half is zero. In QK, b0 carries channel 8 m + t and b1 channel
// 8 m + t + 4 of MMA m; in PV, b0 carries token t and b1 token t + 4 of the
// k-step (8 tokens).
SPECPIPE_HD constexpr int b_head(int g) { return g & 3; }
SPECPIPE_HD constexpr int b_slot(int g) { return g >> 2; }
SPECPIPE_HD std::uint32_t place(std::uint16_t w, int slot) {
  return slot ? std::uint32_t(w) << 16 : std::uint32_t(w);
}
// The same from a pair of f16 (lo, hi): byte selectors of a permute with a
// zero word (bytes 4..7), for the half of lo and of hi.
SPECPIPE_HD constexpr std::uint32_t place_lo_selector(int slot) { return slot ? 0x1044u : 0x4410u; }
SPECPIPE_HD constexpr std::uint32_t place_hi_selector(int slot) { return slot ? 0x3244u : 0x4432u; }
SPECPIPE_HD std::uint32_t byte_perm(std::uint32_t x, std::uint32_t y, std::uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const std::uint64_t v = (std::uint64_t(y) << 32) | x;
  std::uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= std::uint32_t((v >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return r;
#endif
}

}  // namespace specpipe::kernels::cuda::frag
