// The tiled copy of the draft's 4-bit weights (kernels/int4_tiled.hpp), on
// the CPU: every weight read back equals the row layout's (code, scale and
// zero, and z + s q bit for bit), padding rows and columns are zero, the
// offsets are the documented lane order, the row layout's padding bytes are
// not copied, and a CPU walk over the tiled bytes in the GPU kernel's order
// (int4 GEMV v7: its pieces, words, nibbles and scale indices) gives the
// product int4_linear gives, so the kernel's indexing is checked without a
// device.
#include "kernels/int4_tiled.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "kernels/int4_linear.hpp"
#include "support/test_util.hpp"

namespace specpipe::kernels::cpu {
namespace {

int4_weights random_int4(std::uint64_t seed, std::int64_t out, std::int64_t in, std::int64_t group) {
  std::mt19937_64 rng(seed);
  const auto w = test::random_floats(rng, std::size_t(out * in), -1.f, 1.f, 0.01);
  return quantize_int4(w.data(), dtype::f32, out, in, 0, group);
}

using shape = std::tuple<std::int64_t, std::int64_t, std::int64_t>;  // out, in, group

class int4_tiled_shapes : public ::testing::TestWithParam<shape> {};

TEST_P(int4_tiled_shapes, every_weight_reads_back_as_in_the_row_layout) {
  const auto [out, in, group] = GetParam();
  const std::uint64_t seed = test::default_seed + std::uint64_t(out * 131 + in * 7 + group);
  SCOPED_TRACE(test::seed_trace(seed));
  const int4_weights q = random_int4(seed, out, in, group);
  const int4_tiled_weights t = tile_int4(q.view());
  ASSERT_EQ(std::int64_t(t.codes.size()), int4_tiled_code_bytes(out, in));
  ASSERT_EQ(std::int64_t(t.scale_zero.size()), int4_tiled_scale_zero_size(out, in, group));
  const std::int64_t groups = q.view().groups();
  std::vector<float> row(static_cast<std::size_t>(in));
  int bad = 0;
  for (std::int64_t r = 0; r < out; ++r) {
    dequantize_int4_row(q.view(), r, row.data());
    for (std::int64_t c = 0; c < in; ++c) {
      const unsigned want = (q.codes[std::size_t(r * q.code_stride + c / 2)] >> (4 * (c % 2))) & 15u;
      const float got = int4_tiled_weight(t.view(), r, c);
      if ((int4_tiled_code(t.view(), r, c) != want || std::memcmp(&got, &row[std::size_t(c)], 4) != 0) && bad++ < 5)
        ADD_FAILURE() << "(" << r << ", " << c << "): code " << int(int4_tiled_code(t.view(), r, c)) << " vs "
                      << want << ", weight " << got << " vs " << row[std::size_t(c)];
    }
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::uint16_t* sz = t.scale_zero.data() + int4_tiled_scale_offset(r, g, groups);
      EXPECT_EQ(sz[0], q.scale[std::size_t(r * groups + g)]) << "scale of row " << r << " group " << g;
      EXPECT_EQ(sz[1], q.zero[std::size_t(r * groups + g)]) << "zero of row " << r << " group " << g;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST_P(int4_tiled_shapes, padding_rows_and_columns_are_zero) {
  const auto [out, in, group] = GetParam();
  const std::uint64_t seed = test::default_seed + 3 + std::uint64_t(out * 131 + in * 7 + group);
  SCOPED_TRACE(test::seed_trace(seed));
  const int4_weights q = random_int4(seed, out, in, group);
  const int4_tiled_weights t = tile_int4(q.view());
  // Mark every nibble a real weight owns; all others must be 0.
  std::vector<std::uint8_t> owned(t.codes.size(), 0);
  for (std::int64_t r = 0; r < out; ++r)
    for (std::int64_t c = 0; c < in; ++c) {
      const std::int64_t nib = int4_tiled_code_nibble(r, c, in), o = nib / 2;
      ASSERT_GE(o, 0);
      ASSERT_LT(o, std::int64_t(owned.size()));
      const std::uint8_t nibble = nib % 2 ? 0xf0 : 0x0f;
      ASSERT_EQ(owned[std::size_t(o)] & nibble, 0) << "(" << r << ", " << c << ") shares a nibble";
      owned[std::size_t(o)] |= nibble;
    }
  for (std::size_t i = 0; i < t.codes.size(); ++i)
    ASSERT_EQ(t.codes[i] & ~owned[i], 0) << "byte " << i << " has bits outside the weights' nibbles";
  const std::int64_t groups = q.view().groups(), tiles = (out + 15) / 16;
  for (std::int64_t r = out; r < tiles * 16; ++r)
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::uint16_t* sz = t.scale_zero.data() + int4_tiled_scale_offset(r, g, groups);
      EXPECT_EQ(sz[0], 0) << "scale of padding row " << r;
      EXPECT_EQ(sz[1], 0) << "zero of padding row " << r;
    }
}

// int4 GEMV v7 in scalar code: block = tile, warp-chunk loop, lane (g, t),
// the pieces at 64 ch + lane (+ 32 for rows g + 8) in 16-byte units, word i
// = columns 128 ch + 32 i + 8 t + e at nibble e / 2 + 4 (e % 2) (pair p =
// nibbles p, p + 4 = columns 2p, 2p + 1), the (sa, za, sb, zb) entry at
// tile * groups * 8 + g + 8 gi in 8-byte units, gi from the chunk (k and
// group multiples of 128) or the word (otherwise), words past k skipped.
// Also returns sum |x w| per row, the scale of the f32 reference's rounding.
std::pair<std::vector<double>, std::vector<double>> kernel_order_product(const int4_tiled_weights& tw,
                                                                         const std::vector<float>& x) {
  const std::int64_t n = tw.out, k = tw.in, group = tw.group, groups = (k + group - 1) / group;
  const std::int64_t chunks = (k + 127) / 128, tiles = (n + 15) / 16;
  const bool whole = k % 128 == 0 && group % 128 == 0;
  std::vector<double> y(std::size_t(n), 0.0), mag(std::size_t(n), 0.0);
  for (std::int64_t tile = 0; tile < tiles; ++tile)
    for (std::int64_t ch = 0; ch < chunks; ++ch)
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        for (int half = 0; half < 2; ++half) {
          const std::uint8_t* piece = tw.codes.data() + 16 * (tile * chunks * 64 + lane + 64 * ch + 32 * half);
          const std::int64_t row = tile * 16 + g + 8 * half;
          for (int i = 0; i < 4; ++i) {
            const std::int64_t c0 = ch * 128 + 32 * i + 8 * t;
            if (c0 >= k) continue;  // the last chunk's padding words
            std::uint32_t word;
            std::memcpy(&word, piece + 4 * i, 4);
            const std::int64_t gi = whole ? ch / (group / 128) : (ch * 4 + i) / (group / 32);
            const std::uint16_t* sz = tw.scale_zero.data() + 4 * (tile * groups * 8 + g + 8 * gi) + 2 * half;
            const double s = f16_to_f32(sz[0]), z = f16_to_f32(sz[1]);
            for (int p = 0; p < 4; ++p)
              for (int h = 0; h < 2; ++h) {
                const int e = 2 * p + h;  // nibble p + 4 h
                const double q = double((word >> (4 * (p + 4 * h))) & 15u);
                if (row >= n) continue;
                const double prod = double(x[std::size_t(c0 + e)]) * (z + s * q);
                y[std::size_t(row)] += prod;
                mag[std::size_t(row)] += std::fabs(prod);
              }
          }
        }
      }
  return {y, mag};
}

TEST_P(int4_tiled_shapes, the_gpu_kernels_reading_order_gives_the_product) {
  const auto [out, in, group] = GetParam();
  if (in % 32 != 0 || group % 32 != 0) GTEST_SKIP() << "int4 GEMV v7 takes k and group multiples of 32";
  const std::uint64_t seed = test::default_seed + 5 + std::uint64_t(out * 131 + in * 7 + group);
  SCOPED_TRACE(test::seed_trace(seed));
  const int4_weights q = random_int4(seed, out, in, group);
  std::mt19937_64 rng(seed + 1);
  const auto x = test::random_floats(rng, std::size_t(in), -1.f, 1.f, 0.01);
  std::vector<float> want(static_cast<std::size_t>(out));
  int4_linear_args a;
  a.x = x.data();
  a.w = q.view();
  a.y = want.data();
  a.n = 1;
  int4_linear(a);
  const auto [got, mag] = kernel_order_product(tile_int4(q.view()), x);
  for (std::int64_t r = 0; r < out; ++r)
    ASSERT_NEAR(got[std::size_t(r)], want[std::size_t(r)], 1e-5 + 1e-4 * mag[std::size_t(r)]) << "row " << r;
}

INSTANTIATE_TEST_SUITE_P(
    shapes, int4_tiled_shapes,
    ::testing::Values(shape{16, 128, 128},   // one tile, one chunk
                      shape{1, 32, 32},      // one row: 15 padding rows, 96 padding columns
                      shape{17, 256, 128},   // a second tile of one real row
                      shape{33, 4096, 128},  // long rows, odd n
                      shape{77, 256, 64}, shape{45, 384, 32}, shape{129, 512, 32},
                      shape{40, 1024, 256},               // two chunks per group
                      shape{31, 480, 160}, shape{23, 96, 96},  // groups that are not powers of two, k % 128 != 0
                      shape{9, 200, 64},                  // in not a multiple of 32
                      shape{5, 77, 8}, shape{3, 13, 2}));  // odd in: half a byte of padding

TEST(int4_tiled, offsets_follow_the_lane_order) {
  const std::int64_t in = 1000;  // 8 chunks
  // Within a word: even columns in nibbles 0..3, odd ones in nibbles 4..7.
  EXPECT_EQ(int4_tiled_code_nibble(0, 0, in), 0);
  EXPECT_EQ(int4_tiled_code_nibble(0, 1, in), 4);   // column 1: nibble 4 (byte 2, low)
  EXPECT_EQ(int4_tiled_code_nibble(0, 2, in), 1);   // column 2: byte 0's high nibble
  EXPECT_EQ(int4_tiled_code_nibble(0, 6, in), 3);
  EXPECT_EQ(int4_tiled_code_nibble(0, 7, in), 7);
  EXPECT_EQ(int4_tiled_code_nibble(0, 8, in), 2 * 16);      // lane t = 1
  EXPECT_EQ(int4_tiled_code_nibble(0, 32, in), 2 * 4);      // word 1 of lane 0
  EXPECT_EQ(int4_tiled_code_nibble(1, 0, in), 2 * 64);      // lane g = 1
  EXPECT_EQ(int4_tiled_code_nibble(8, 0, in), 2 * 512);     // the second half: rows 8..15
  EXPECT_EQ(int4_tiled_code_nibble(0, 128, in), 2 * 1024);  // chunk 1
  EXPECT_EQ(int4_tiled_code_nibble(16, 0, in), 2 * 8 * 1024);  // tile 1 after the 8 chunks of tile 0
  EXPECT_EQ(int4_tiled_code_nibble(16 + 8 + 7, 128 + 96 + 24 + 7, in), 2 * (9 * 1024 + 512 + 31 * 16 + 12) + 7);
  EXPECT_EQ(int4_tiled_scale_offset(0, 0, 5), 0);
  EXPECT_EQ(int4_tiled_scale_offset(8, 0, 5), 2);   // row g + 8 follows row g's pair
  EXPECT_EQ(int4_tiled_scale_offset(3, 0, 5), 12);  // g = 3
  EXPECT_EQ(int4_tiled_scale_offset(0, 1, 5), 32);  // the next group: 8 entries of 4
  EXPECT_EQ(int4_tiled_scale_offset(16, 0, 5), 5 * 32);
}

TEST(int4_tiled, a_lanes_piece_is_four_words_of_its_row) {
  const int4_weights q = random_int4(test::default_seed, 32, 512, 128);
  const int4_tiled_weights t = tile_int4(q.view());
  for (std::int64_t r : {0, 5, 8, 15, 16, 31})
    for (std::int64_t ch = 0; ch < 4; ++ch)
      for (int tl = 0; tl < 4; ++tl) {
        const std::int64_t lane = 4 * (r % 8) + tl;
        const std::uint8_t* piece = t.codes.data() + ((r / 16 * 4 + ch) * 2 + r % 16 / 8) * 512 + lane * 16;
        for (int i = 0; i < 4; ++i) {
          std::uint32_t word;
          std::memcpy(&word, piece + 4 * i, 4);
          for (int e = 0; e < 8; ++e) {
            const std::int64_t c = 128 * ch + 32 * i + 8 * tl + e;
            const unsigned want = (q.codes[std::size_t(r * q.code_stride + c / 2)] >> (4 * (c % 2))) & 15u;
            EXPECT_EQ((word >> (4 * int4_tiled_word_nibble(e))) & 15u, want)
                << "row " << r << " chunk " << ch << " lane t " << tl << " word " << i << " column " << e;
          }
        }
      }
}

TEST(int4_tiled, the_row_layouts_padding_is_not_copied) {
  const std::int64_t out = 7, in = 77, group = 8;
  int4_weights q = random_int4(test::default_seed + 9, out, in, group);
  const int4_tiled_weights clean = tile_int4(q.view());
  for (std::int64_t r = 0; r < out; ++r) {
    std::uint8_t* row = q.codes.data() + r * q.code_stride;
    row[in / 2] |= 0xf0;  // the odd last column's high nibble
    for (std::int64_t b = (in + 1) / 2; b < q.code_stride; ++b) row[b] = 0xa5;
  }
  const int4_tiled_weights dirty = tile_int4(q.view());
  EXPECT_EQ(dirty.codes, clean.codes);
  EXPECT_EQ(dirty.scale_zero, clean.scale_zero);
}

TEST(int4_tiled, takes_the_row_layouts_bytes_for_whole_tiles_and_chunks) {
  for (const auto& [out, in, group] : {shape{4096, 4096, 128}, shape{12288, 4096, 64}, shape{4096, 11008, 128}})
    EXPECT_EQ(std::size_t(int4_tiled_code_bytes(out, in) + 2 * int4_tiled_scale_zero_size(out, in, group)),
              int4_bytes(out, in, group))
        << out << "x" << in << " g" << group;
  // Otherwise the padding is what it adds: one tile, one chunk.
  EXPECT_EQ(int4_tiled_code_bytes(17, 130), 2 * 2 * 1024);
  EXPECT_EQ(int4_tiled_scale_zero_size(17, 130, 64), 2 * 3 * 32);
}

TEST(int4_tiled, malformed_matrices_and_elements_outside_are_refused) {
  int4_weights q = random_int4(test::default_seed, 4, 64, 32);
  int4_matrix m = q.view();
  m.codes = nullptr;
  EXPECT_THROW(tile_int4(m), std::invalid_argument);
  m = q.view();
  m.group = 3;
  EXPECT_THROW(tile_int4(m), std::invalid_argument);
  m = q.view();
  m.code_stride = 31;
  EXPECT_THROW(tile_int4(m), std::invalid_argument);
  const int4_tiled_weights t = tile_int4(q.view());
  EXPECT_THROW(int4_tiled_weight(t.view(), 4, 0), std::invalid_argument);
  EXPECT_THROW(int4_tiled_weight(t.view(), 0, 64), std::invalid_argument);
  EXPECT_THROW(int4_tiled_code(t.view(), -1, 0), std::invalid_argument);
  EXPECT_THROW(int4_tiled_weight(int4_tiled_matrix{}, 0, 0), std::invalid_argument);
}

}  // namespace
}  // namespace specpipe::kernels::cpu
