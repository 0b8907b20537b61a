// The host-built device arrangement of the GPU attention tests
// (packed_device_layout.hpp) reads back the same keys and values as the CPU
// fixture it came from: the harness of the GPU tests, checked without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/packed_device_layout.hpp"

namespace specpipe::test {
namespace {

// Every key and value the arrangement gives back equals the fixture's
// dequantized one (window rows rounded to bf16, as the device keeps them).
void expect_reads_back(const std::vector<packed_fixture>& fs, const device_layout_host& L) {
  for (int s = 0; s < int(fs.size()); ++s) {
    const auto& f = fs[std::size_t(s)];
    std::vector<float> dk, dv;
    f.dequantized(dk, dv);
    for (std::int64_t p = 0; p < f.len(); ++p)
      for (std::int64_t h = 0; h < f.kv_heads; ++h)
        for (int c = 0; c < f.d; ++c) {
          const std::size_t at = std::size_t((p * f.kv_heads + h) * f.d + c);
          const bool win = p >= f.quantized();
          const float wk = win ? bf16_to_f32(f32_to_bf16(dk[at])) : dk[at];
          const float wv = win ? bf16_to_f32(f32_to_bf16(dv[at])) : dv[at];
          ASSERT_FLOAT_EQ(L.key_at(s, h, p, c, f.quantized(), f.read_lower), wk)
              << "slot " << s << " position " << p << " head " << h << " channel " << c;
          ASSERT_FLOAT_EQ(L.value_at(s, h, p, c, f.quantized(), f.read_lower), wv)
              << "slot " << s << " position " << p << " head " << h << " channel " << c;
        }
  }
}

TEST(packed_device_layout, reads_back_the_fixture) {
  namespace kc = kernels::cpu;
  for (const auto rule : {kc::quant_rule::rtn, kc::quant_rule::hier})
    for (const int bits : {1, 4}) {
      if (rule == kc::quant_rule::hier && bits != 4) continue;
      std::vector<packed_fixture> fs(3);
      const std::int64_t groups[3] = {3, 0, 5}, windows[3] = {37, 45, 1};
      for (int s = 0; s < 3; ++s) {
        auto& f = fs[std::size_t(s)];
        f.heads = 8;
        f.kv_heads = 2;
        f.d = 64;
        f.group = 32;
        f.groups = groups[s];
        f.window = windows[s];
        f.bits = bits;
        f.rule = rule;
        f.read_lower = rule == kc::quant_rule::hier;
        f.build(40 + std::uint64_t(s));
      }
      expect_reads_back(fs, device_layout_host::build(fs, 47));  // ring wraps for slots 0 and 2
    }
}

TEST(packed_device_layout, lane_order_reads_back_the_fixture) {
  namespace kc = kernels::cpu;
  struct fmt {
    kc::quant_rule rule;
    int bits;
  };
  for (const fmt fm : {fmt{kc::quant_rule::rtn, 1}, fmt{kc::quant_rule::rtn, 2}, fmt{kc::quant_rule::specache, 1},
                       fmt{kc::quant_rule::hier, 4}})
    for (const int group : {32, 128}) {
      std::vector<packed_fixture> fs(2);
      const std::int64_t groups[2] = {group == 32 ? 5 : 2, 1}, windows[2] = {19, 3};
      for (int s = 0; s < 2; ++s) {
        auto& f = fs[std::size_t(s)];
        f.heads = 4;
        f.kv_heads = 2;
        f.d = 128;
        f.group = group;
        f.groups = groups[s];
        f.window = windows[s];
        f.bits = fm.bits;
        f.rule = fm.rule;
        f.read_lower = fm.rule == kc::quant_rule::hier;
        f.build(70 + std::uint64_t(s));
      }
      SCOPED_TRACE("bits " + std::to_string(fm.bits) + " G " + std::to_string(group));
      expect_reads_back(fs, device_layout_host::build(fs, 23, 0, kernels::cuda::packed_order::lane));
    }
}

}  // namespace
}  // namespace specpipe::test
