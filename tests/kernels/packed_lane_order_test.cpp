// The lane order of packed codes (kernels/cuda/packed_lane_order.hpp): every
// code has its own bits, the inverse maps the quantizer assembles bytes with
// agree with the forward ones, and each lane finds its MMA operands where
// the v4 kernel reads them (the PTX m16n8k16 fragment layout, spelled out
// here independently of the header's arithmetic).
#include <gtest/gtest.h>

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

TEST(packed_lane_order, extraction_positions_stay_inside_an_f16_mantissa) {
  // 1024 + 2^p code is exact in f16 when the code's bits end below bit 8.
  for (const int b : {1, 2, 4})
    for (int i = 0; i < 32; ++i)
      for (int hi = 0; hi < 2; ++hi) {
        const int p = extracted_bit(i, hi, b) % 8;
        EXPECT_LE(p + b, 8) << "b=" << b << " i=" << i;
      }
}

}  // namespace
}  // namespace specpipe::test
