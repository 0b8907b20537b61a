// The lane order of packed codes (kernels/cuda/packed_lane_order.hpp): every
// code has its own bits, the inverse maps the quantizer assembles bytes with
// agree with the forward ones, and each lane finds its MMA operands where
// the v4 kernel reads them (the PTX m16n8k16 fragment layout, spelled out
// here independently of the header's arithmetic).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "kernels/cuda/packed_lane_order.hpp"

namespace specpipe::test {
namespace {

namespace lo = kernels::cuda::lane_order;

TEST(packed_lane_order, keys_cover_every_bit_of_a_row_once) {
  for (const int b : {1, 2, 4}) {
    std::set<int> bits;
    for (int c = 0; c < 128; ++c) {
      const int at = lo::key_bit(c, b);
      EXPECT_EQ(at % b, 0) << "b=" << b << " c=" << c;
      EXPECT_LT(at, 8 * lo::key_row_bytes(b));
      for (int i = 0; i < b; ++i) EXPECT_TRUE(bits.insert(at + i).second) << "b=" << b << " c=" << c;
      // The inverse: code k of byte at / 8.
      EXPECT_EQ(lo::key_channel_at(at / 8, (at % 8) / b, b), c) << "b=" << b;
    }
    EXPECT_EQ(int(bits.size()), 8 * lo::key_row_bytes(b));
  }
}

TEST(packed_lane_order, values_cover_every_bit_of_a_block_once) {
  for (const int b : {1, 2, 4}) {
    std::set<int> bits;
    for (int tau = 0; tau < 16; ++tau)
      for (int c = 0; c < 128; ++c) {
        const int at = lo::value_bit(tau, c, b);
        for (int i = 0; i < b; ++i) EXPECT_TRUE(bits.insert(at + i).second) << "b=" << b;
        EXPECT_EQ(lo::value_at(at / 8, (at % 8) / b, b), tau * 128 + c) << "b=" << b;
      }
    EXPECT_EQ(int(bits.size()), 8 * lo::value_block_bytes(b));
  }
}

// Where the kernel's extraction takes pair i of a lane's words: the lower
// code at bit 8 (s / (8/b)) + b (s % (8/b)) of word i / (16/b), the upper
// code 16 bits above, s = i % (16/b).
int extracted_bit(int i, int hi, int b) {
  const int pw = 16 / b, ph = 8 / b, s = i % pw;
  return 32 * (i / pw) + (s >= ph ? 8 : 0) + 16 * hi + (s % ph) * b;
}

TEST(packed_lane_order, score_operands_sit_where_each_lane_loads_them) {
  // B of m16n8k16 (k = channels, n = tokens): lane 4g + t holds
  // B[2t, 2t+1][g] in b0 and B[2t+8, 2t+9][g] in b1, for k-step j the
  // channels 16 j + those. The lane loads token g's row from byte 4 b t.
  for (const int b : {1, 2, 4})
    for (int t = 0; t < 4; ++t)
      for (int j = 0; j < 8; ++j)
        for (int h = 0; h < 2; ++h)
          for (int hi = 0; hi < 2; ++hi) {
            const int c = 16 * j + 8 * h + 2 * t + hi;
            EXPECT_EQ(lo::key_bit(c, b), 32 * b * t + extracted_bit(2 * j + h, hi, b))
                << "b=" << b << " t=" << t << " j=" << j;
          }
}

TEST(packed_lane_order, value_operands_sit_where_each_lane_loads_them) {
  // A of m16n8k16 for O^T = V^T P^T (m = channels, k = tokens): a0 =
  // A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 =
  // A[g+8][2t+8, 2t+9], m-tile j adding 16 j to the channel. Lane 4g + t
  // loads 8 b bytes from byte 8 b (4g + t) of the block.
  for (const int b : {1, 2, 4})
    for (int g = 0; g < 8; ++g)
      for (int t = 0; t < 4; ++t)
        for (int j = 0; j < 8; ++j)
          for (int r = 0; r < 4; ++r)
            for (int hi = 0; hi < 2; ++hi) {
              const int c = 16 * j + g + 8 * (r & 1), tau = 2 * t + 8 * (r >> 1) + hi;
              EXPECT_EQ(lo::value_bit(tau, c, b), 64 * b * (4 * g + t) + extracted_bit(4 * j + r, hi, b))
                  << "b=" << b << " g=" << g << " t=" << t << " j=" << j << " r=" << r;
            }
}

// The value of an f16 bit pattern, spelled out (subnormals included).
double f16_value(unsigned bits) {
  const int e = int(bits >> 10) & 31, m = int(bits & 1023u);
  const double mag = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(1024.0 + m, e - 25);
  return (bits & 0x8000u) ? -mag : mag;
}

TEST(packed_lane_order, extraction_makes_subnormals_of_the_codes) {
  // The kernel ANDs pair i's word (shifted down 8 for bytes 1 and 3) with
  // (m << p) | (m << (p + 16)), p = pair_shift: each half must then be the
  // f16 code 2^(p - 24) exactly, for every code, at the pair's own bits.
  for (const int b : {1, 2, 4})
    for (int i = 0; i < 32; ++i) {
      const int p = lo::pair_shift(i, b), pw = 16 / b, ph = 8 / b, s = i % pw;
      EXPECT_LE(p + b, 10) << "b=" << b << " i=" << i;  // inside the mantissa, under a zero exponent
      for (int hi = 0; hi < 2; ++hi)
        EXPECT_EQ(32 * (i / pw) + (s >= ph ? 8 : 0) + 16 * hi + p, extracted_bit(i, hi, b)) << "b=" << b << " i=" << i;
      for (unsigned code = 0; code < (1u << b); ++code) {
        const unsigned word = (code << p) | ((((1u << b) - 1u) - code) << (p + 16));
        EXPECT_EQ(f16_value(word & 0xffffu), std::ldexp(double(code), p - 24)) << "b=" << b << " i=" << i;
        EXPECT_EQ(f16_value(word >> 16), std::ldexp(double((1u << b) - 1u - code), p - 24));
      }
    }
}

TEST(packed_lane_order, value_shifts_split_into_channel_and_position_parts) {
  // The kernel scales P' of positions + 8 (A registers a2, a3) by 2^-VT and
  // each channel row of O^T by 2^(24 - p) of its a0 / a1 pair: that is
  // exact only if every pair's shift is its channel part plus VT.
  const int expect[3] = {2, 4, 0};
  int k = 0;
  for (const int b : {1, 2, 4}) {
    const int vt = lo::value_token_shift(b);
    EXPECT_EQ(vt, expect[k++]) << "b=" << b;
    for (int j = 0; j < 8; ++j)
      for (int r = 0; r < 4; ++r)
        EXPECT_EQ(lo::pair_shift(4 * j + r, b), lo::pair_shift(4 * j + (r & 1), b) + (r >> 1) * vt)
            << "b=" << b << " j=" << j << " r=" << r;
  }
}

}  // namespace
}  // namespace specpipe::test
