// The fragment mapping of the packed decode attention (kernels/cuda/
// packed_fragments.hpp), checked on the host: one warp's score and value
// MMAs are emulated lane by lane from the same helper functions the kernel
// calls, with mma.sync.m16n8k16's fragment layout written out from the PTX
// ISA, and compared with the direct products over the codes of
// memory/kv_layout.hpp. Runs without a GPU, so a wrong index shows up in CI.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/packed_fragments.hpp"
#include "memory/dtype.hpp"
#include "memory/kv_layout.hpp"

namespace specpipe::test {
namespace {

namespace frag = kernels::cuda::frag;

using regs4 = std::array<std::uint32_t, 4>;
using regs2 = std::array<std::uint32_t, 2>;

float lo(std::uint32_t r) { return f16_to_f32(std::uint16_t(r & 0xffffu)); }
float hi(std::uint32_t r) { return f16_to_f32(std::uint16_t(r >> 16)); }

// D (16x8) = A (16x16) B (16x8) from per-lane fragments, as the PTX ISA lays
// them out for mma.m16n8k16 with f16 inputs. Returns d[lane][0..3].
std::array<std::array<double, 4>, 32> mma(const std::array<regs4, 32>& a, const std::array<regs2, 32>& b) {
  double A[16][16] = {}, Bm[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    A[g][2 * t] = lo(a[lane][0]);
    A[g][2 * t + 1] = hi(a[lane][0]);
    A[g + 8][2 * t] = lo(a[lane][1]);
    A[g + 8][2 * t + 1] = hi(a[lane][1]);
    A[g][2 * t + 8] = lo(a[lane][2]);
    A[g][2 * t + 9] = hi(a[lane][2]);
    A[g + 8][2 * t + 8] = lo(a[lane][3]);
    A[g + 8][2 * t + 9] = hi(a[lane][3]);
    Bm[2 * t][g] = lo(b[lane][0]);
    Bm[2 * t + 1][g] = hi(b[lane][0]);
    Bm[2 * t + 8][g] = lo(b[lane][1]);
    Bm[2 * t + 9][g] = hi(b[lane][1]);
  }
  std::array<std::array<double, 4>, 32> d{};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; ++i)
      for (int k = 0; k < 16; ++k) d[lane][i] += A[rows[i]][k] * Bm[k][cols[i]];
  }
  return d;
}

// The kernel's HFMA2 on a raw pair: exact, so plain float math reproduces it.
std::uint32_t to_code(std::uint32_t raw, float mul, float add) {
  return std::uint32_t(f32_to_f16(lo(raw) * mul + add)) | (std::uint32_t(f32_to_f16(hi(raw) * mul + add)) << 16);
}

// A registers from two words (and, INT8, their lower-plane words), as a_regs().
regs4 a_regs(int bits, bool int8, std::uint32_t w1, std::uint32_t w2, std::uint32_t l1, std::uint32_t l2, int g) {
  if (int8) {
    const auto x = frag::extract_int8(w1, l1, g), y = frag::extract_int8(w2, l2, g);
    return {to_code(x.r0, 1, -1024), to_code(x.r1, 1, -1024), to_code(y.r0, 1, -1024), to_code(y.r1, 1, -1024)};
  }
  const auto x = frag::extract(w1, bits, g), y = frag::extract(w2, bits, g);
  return {to_code(x.r0, 1, -1024), to_code(x.r1, frag::r1_mul(bits), frag::r1_add(bits)), to_code(y.r0, 1, -1024),
          to_code(y.r1, frag::r1_mul(bits), frag::r1_add(bits))};
}

std::uint32_t word_at(const std::vector<std::uint8_t>& bytes, std::size_t at) {
  return std::uint32_t(bytes[at]) | (std::uint32_t(bytes[at + 1]) << 8) | (std::uint32_t(bytes[at + 2]) << 16) |
         (std::uint32_t(bytes[at + 3]) << 24);
}

struct format {
  const char* name;
  int bits;
  bool int8;
};
const format formats[] = {{"1-bit", 1, false}, {"2-bit", 2, false}, {"4-bit", 4, false}, {"INT8", 4, true}};

// Scores of one 32-token slice of a key group against 4 heads: the D/8 MMAs
// of the kernel's score loop, then D read back through run_index/head_in_tile.
TEST(packed_fragments, score_mmas_match_the_direct_products) {
  for (const auto& f : formats)
    for (const int group : {32, 64, 128})
      for (const int d : {64, 128}) {
        SCOPED_TRACE(std::string(f.name) + " G=" + std::to_string(group) + " d=" + std::to_string(d));
        std::mt19937 rng(unsigned(group * 7 + d + f.bits * 1000 + f.int8));
        const int chan = group * f.bits / 8;  // bytes per channel of the key block
        std::vector<std::uint8_t> upper(std::size_t(d * chan)), lower(upper.size());
        for (auto& x : upper) x = std::uint8_t(rng());
        for (auto& x : lower) x = std::uint8_t(rng());
        // w[h][c]: f16 values, as the kernel stores them.
        std::uniform_real_distribution<float> u(-2.f, 2.f);
        std::vector<float> w(std::size_t(4 * d));
        for (auto& x : w) x = f16_to_f32(f32_to_f16(u(rng)));
        auto code = [&](int c, int tok) {
          const std::uint8_t* s = upper.data() + std::size_t(c * chan);
          const unsigned up = packed_code(s, tok, f.bits);
          return f.int8 ? 16 * up + packed_code(lower.data() + std::size_t(c * chan), tok, 4) : up;
        };
        for (int slice = 0; slice < group / 32; ++slice) {
          std::array<std::array<double, 4>, 32> acc{};
          for (int m = 0; m < d / 8; ++m) {
            std::array<regs4, 32> a;
            std::array<regs2, 32> b;
            for (int lane = 0; lane < 32; ++lane) {
              const int g = lane >> 2, t = lane & 3;
              // Channel c's word qword(g) of the slice (the kernel's transposed stage holds the same bytes).
              auto word = [&](const std::vector<std::uint8_t>& plane, int c) {
                return word_at(plane, std::size_t(c * chan + slice * 4 * f.bits + 4 * frag::qword(f.bits, g)));
              };
              const int c1 = 8 * m + t, c2 = c1 + 4;
              a[std::size_t(lane)] = a_regs(f.bits, f.int8, word(upper, c1), word(upper, c2), word(lower, c1),
                                            word(lower, c2), g);
              // The kernel stores (b0, b1) placed for both slots and loads its own.
              const int bj = frag::b_slot(g);
              b[std::size_t(lane)] = {frag::place(f32_to_f16(w[std::size_t(frag::b_head(g) * d + c1)]), bj),
                                      frag::place(f32_to_f16(w[std::size_t(frag::b_head(g) * d + c2)]), bj)};
            }
            const auto dm = mma(a, b);
            for (int lane = 0; lane < 32; ++lane)
              for (int i = 0; i < 4; ++i) acc[std::size_t(lane)][std::size_t(i)] += dm[std::size_t(lane)][std::size_t(i)];
          }
          std::vector<int> seen(32 * 4, 0);
          for (int lane = 0; lane < 32; ++lane) {
            const int g = lane >> 2, t = lane & 3;
            for (int i = 0; i < 4; ++i) {
              const int h = frag::head_in_tile(t, i);
              const int tok = frag::run_index(f.bits, g, i >> 1, frag::slot_of_lane(t));
              ASSERT_GE(tok, 0);
              ASSERT_LT(tok, 32);
              ++seen[std::size_t(tok * 4 + h)];
              double want = 0;
              for (int c = 0; c < d; ++c) want += double(code(c, slice * 32 + tok)) * w[std::size_t(h * d + c)];
              EXPECT_NEAR(acc[std::size_t(lane)][std::size_t(i)], want, 1e-9 * (1 + std::fabs(want)))
                  << "lane " << lane << " element " << i << " (token " << tok << ", head " << h << ")";
            }
          }
          for (int k = 0; k < 32 * 4; ++k) EXPECT_EQ(seen[std::size_t(k)], 1) << "every (token, head) exactly once";
        }
      }
}

// Values of one 32-token slice against 4 heads: the producer pass writes P'
// (lane = token) into the [ks][h][t] pair layout, the consumer reads it as B,
// the A registers come from the token rows; O read back through pv_channel.
TEST(packed_fragments, value_mmas_match_the_direct_products) {
  for (const auto& f : formats)
    for (const int d : {64, 128}) {
      SCOPED_TRACE(std::string(f.name) + " d=" + std::to_string(d));
      std::mt19937 rng(unsigned(d + f.bits * 100 + f.int8));
      const int row = d * f.bits / 8;
      std::vector<std::uint8_t> upper(std::size_t(32 * row)), lower(upper.size());
      for (auto& x : upper) x = std::uint8_t(rng());
      for (auto& x : lower) x = std::uint8_t(rng());
      std::uniform_real_distribution<float> u(0.f, 1.f);
      std::vector<float> pp(4 * 32);  // P'[h][token], f16 values
      for (auto& x : pp) x = f16_to_f32(f32_to_f16(u(rng)));
      // Producer: lane = token tau -> u16 slot ((ks * 4 + h) * 4 + t) * 2 + half.
      std::vector<std::uint16_t> pp_s(4 * 4 * 4 * 2);
      for (int tau = 0; tau < 32; ++tau)
        for (int h = 0; h < 4; ++h)
          pp_s[std::size_t((((tau >> 3) * 4 + h) * 4 + (tau & 3)) * 2 + ((tau >> 2) & 1))] =
              f32_to_f16(pp[std::size_t(h * 32 + tau)]);
      auto code = [&](int tok, int c) {
        const unsigned up = packed_code(upper.data() + std::size_t(tok * row), c, f.bits);
        return f.int8 ? 16 * up + packed_code(lower.data() + std::size_t(tok * row), c, 4) : up;
      };
      std::vector<std::array<std::array<double, 4>, 32>> acc(std::size_t(d / 32));
      for (int ks = 0; ks < 4; ++ks)
        for (int cb = 0; cb < d / 32; ++cb) {
          std::array<regs4, 32> a;
          std::array<regs2, 32> b;
          for (int lane = 0; lane < 32; ++lane) {
            const int g = lane >> 2, t = lane & 3;
            const int ta = 8 * ks + t, tb = ta + 4;
            auto word = [&](const std::vector<std::uint8_t>& plane, int tok) {
              return word_at(plane, std::size_t(tok * row + cb * 4 * f.bits + 4 * frag::qword(f.bits, g)));
            };
            a[std::size_t(lane)] =
                a_regs(f.bits, f.int8, word(upper, ta), word(upper, tb), word(lower, ta), word(lower, tb), g);
            const std::size_t at = std::size_t(((ks * 4 + frag::b_head(g)) * 4 + t) * 2);
            const std::uint32_t pair = std::uint32_t(pp_s[at]) | (std::uint32_t(pp_s[at + 1]) << 16);
            const int bj = frag::b_slot(g);
            b[std::size_t(lane)] = {frag::byte_perm(pair, 0, frag::place_lo_selector(bj)),
                                    frag::byte_perm(pair, 0, frag::place_hi_selector(bj))};
          }
          const auto dm = mma(a, b);
          for (int lane = 0; lane < 32; ++lane)
            for (int i = 0; i < 4; ++i)
              acc[std::size_t(cb)][std::size_t(lane)][std::size_t(i)] += dm[std::size_t(lane)][std::size_t(i)];
        }
      std::vector<int> seen(std::size_t(d * 4), 0);
      for (int cb = 0; cb < d / 32; ++cb)
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane >> 2, t = lane & 3;
          for (int i = 0; i < 4; ++i) {
            const int h = frag::head_in_tile(t, i);
            const int c = frag::pv_channel(f.bits, g, t, cb, i);
            ASSERT_GE(c, cb * 32);
            ASSERT_LT(c, cb * 32 + 32);
            ++seen[std::size_t(c * 4 + h)];
            double want = 0;
            for (int tok = 0; tok < 32; ++tok) want += double(code(tok, c)) * pp[std::size_t(h * 32 + tok)];
            EXPECT_NEAR(acc[std::size_t(cb)][std::size_t(lane)][std::size_t(i)], want, 1e-9 * (1 + std::fabs(want)))
                << "block " << cb << " lane " << lane << " element " << i << " (channel " << c << ", head " << h
                << ")";
          }
        }
      for (int k = 0; k < d * 4; ++k) EXPECT_EQ(seen[std::size_t(k)], 1) << "every (channel, head) exactly once";
    }
}

TEST(packed_fragments, byte_perm_places_a_half_in_its_slot) {
  const std::uint32_t pair = 0xBBBBAAAAu;
  EXPECT_EQ(frag::byte_perm(pair, 0, frag::place_lo_selector(0)), 0x0000AAAAu);
  EXPECT_EQ(frag::byte_perm(pair, 0, frag::place_lo_selector(1)), 0xAAAA0000u);
  EXPECT_EQ(frag::byte_perm(pair, 0, frag::place_hi_selector(0)), 0x0000BBBBu);
  EXPECT_EQ(frag::byte_perm(pair, 0, frag::place_hi_selector(1)), 0xBBBB0000u);
  EXPECT_EQ(frag::place(0xAAAA, 0), 0x0000AAAAu);
  EXPECT_EQ(frag::place(0xAAAA, 1), 0xAAAA0000u);
}

}  // namespace
}  // namespace specpipe::test
