#include "kernels/cpu/convert.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace specpipe::kernels::cpu {
namespace {

TEST(convert, f16_load_matches_scalar_conversion_for_every_code) {
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const auto h = std::uint16_t(c);
    const float want = f16_to_f32(h);
    const float got = load_f16::load(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << "code 0x" << std::hex << c;
      ASSERT_EQ(f32_to_bits(got), f32_to_bits(want)) << "NaN payload, code 0x" << std::hex << c;
    } else {
      ASSERT_EQ(f32_to_bits(got), f32_to_bits(want)) << "code 0x" << std::hex << c;
    }
  }
}

TEST(convert, bf16_load_matches_scalar_conversion_for_every_code) {
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const auto h = std::uint16_t(c);
    ASSERT_EQ(f32_to_bits(load_bf16::load(h)), f32_to_bits(bf16_to_f32(h))) << "code " << c;
  }
}

TEST(convert, dispatch_rejects_integer_dtypes_naming_the_operand) {
  try {
    dispatch_float_dtype(dtype::i8, "linear weight", [](auto) { return 0; });
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("linear weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("i8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace specpipe::kernels::cpu
