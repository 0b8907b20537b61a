// Byte accounting of the packed KV layouts, by hand from the formulas.
#include <gtest/gtest.h>

#include "memory/kv_layout.hpp"

namespace specpipe {
namespace {

TEST(KvLayout, PerGroupAndPerTokenBytes) {
  // SpeCache 1-bit, head_dim 128, G = 64: keys 128 ch x 8 B + 128 x (2 + 2) B
  // per 64 tokens; values 16 B + 2 groups x 4 B per token.
  const auto s = kv_layout::make(kv_format::specache, 1, 128, 64, 8, 32);
  EXPECT_EQ(s.key_channel_bytes(), 8);
  EXPECT_EQ(s.key_group_bytes(), 128 * 8 + 128 * 4);
  EXPECT_EQ(s.value_row_bytes(), 16);
  EXPECT_EQ(s.value_token_bytes(), 16 + 2 * 4);
  // Odd head_dim 80 at 2 bits, G = 32: values in groups of 32, 32, 16 channels.
  const auto k = kv_layout::make(kv_format::kivi, 2, 80, 32, 2, 1);
  EXPECT_EQ(k.value_group, 32);
  EXPECT_EQ(k.value_groups(), 3);
  EXPECT_EQ(k.value_row_bytes(), 20);
  EXPECT_EQ(k.key_group_bytes(), 80 * 8 + 80 * 4);
  // hier: two 4-bit planes, G = 128 > head_dim 64 -> one value group.
  const auto h = kv_layout::make(kv_format::hier, 4, 64, 128, 1, 1);
  EXPECT_EQ(h.value_group, 64);
  EXPECT_EQ(h.key_group_bytes(), 2 * 64 * 64 + 64 * 4);
  EXPECT_EQ(h.value_token_bytes(), 2 * 32 + 4);
}

TEST(KvLayout, WholeCacheBytesAndTheDecodeSplit) {
  const auto s = kv_layout::make(kv_format::specache, 1, 128, 64, 8, 32);
  EXPECT_EQ(s.bytes(128, 10, 2), std::size_t(2 * 1536 + 128 * 24 + 10 * 128 * 2 * 2) * 8 * 32);
  EXPECT_THROW((void)s.bytes(100, 0, 2), std::invalid_argument);
  // Token by token with R = 64, G = 64: flushes happen before an append while
  // the window holds >= 128, so 32k tokens leave 128 in the window.
  EXPECT_EQ(quantized_tokens(128, 64, 128), 0);
  EXPECT_EQ(quantized_tokens(129, 64, 128), 64);
  EXPECT_EQ(quantized_tokens(192, 64, 128), 64);
  EXPECT_EQ(quantized_tokens(193, 64, 128), 128);
  EXPECT_EQ(quantized_tokens(32768, 64, 128), 32640);
  EXPECT_EQ(fp16_bytes(32768, 128, 8, 32), std::size_t(32768) * 128 * 4 * 8 * 32);
  // The figure the memory bench reports for llama3-8b at 32k: 0.0973x of fp16.
  const double ratio = double(s.bytes(32640, 128, 2)) / double(fp16_bytes(32768, 128, 8, 32));
  EXPECT_NEAR(ratio, (32640.0 * 48 + 128 * 512) / (32768.0 * 512), 1e-12);
  EXPECT_NEAR(ratio, 0.0973, 5e-5);
}

TEST(KvLayout, RejectsImpossibleLayouts) {
  EXPECT_THROW(kv_layout::make(kv_format::kivi, 3, 128, 64, 1, 1), std::invalid_argument);
  EXPECT_THROW(kv_layout::make(kv_format::specache, 2, 128, 64, 1, 1), std::invalid_argument);
  EXPECT_THROW(kv_layout::make(kv_format::kivi, 1, 128, 12, 1, 1), std::invalid_argument);
  EXPECT_THROW(kv_layout::make(kv_format::full, 16, 128, 64, 1, 1), std::invalid_argument);
}

}  // namespace
}  // namespace specpipe
