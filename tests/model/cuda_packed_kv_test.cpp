// The sizing and window rule of the GPU's quantized cache
// (model/cuda_packed_kv.hpp), without a GPU: runs, per-layer bytes against
// memory/kv_layout.hpp's accounting, the flush rule against the CPU cache's.
#include <gtest/gtest.h>

#include "memory/kv_layout.hpp"
#include "model/cuda_forward.hpp"
#include "model/cuda_packed_kv.hpp"
#include "model/presets.hpp"

namespace specpipe {
namespace {

TEST(cuda_packed_kv, packed_bytes_follow_the_layout_accounting) {
  const auto c = *preset_config("llama3-8b");
  for (const auto& mode : {parse_kv_mode("kivi", 1, 64, 64), parse_kv_mode("kivi", 2, 32, 128),
                           parse_kv_mode("specache", 1, 64, 64), parse_kv_mode("hier", 8, 128, 0)}) {
    SCOPED_TRACE(mode.describe());
    const std::int64_t slots = 3, ctx = 4096;
    const auto s = packed_kv_shape::make(mode, c, slots, ctx, 16, -1);
    const kv_layout l = mode.layout(c);
    EXPECT_EQ(s.max_groups, ctx / mode.group);
    EXPECT_EQ(s.win_cap, mode.flush_at() + 16);
    EXPECT_EQ(s.staging_tokens, ctx);
    // Packed arrays of every slot at capacity = the layout's bytes of ctx
    // quantized tokens and no window, per layer.
    kv_layout one = l;
    one.n_layers = 1;
    EXPECT_EQ(s.layer_packed_bytes(), std::size_t(slots) * one.bytes(ctx, 0, 2));
    EXPECT_EQ(s.layer_window_bytes(), std::size_t(slots * c.num_key_value_heads * s.win_cap * c.head_dim * 2 * 2));
    EXPECT_EQ(s.staging_bytes(), fp16_bytes(ctx, c.head_dim, c.num_key_value_heads, c.num_hidden_layers));
    EXPECT_DOUBLE_EQ(s.packed_bytes_per_token() * double(ctx) * double(slots),
                     double(s.layer_packed_bytes()) * double(c.num_hidden_layers));
  }
  // SpeCache 1-bit per token and KV head at d = 128: key codes 16 B + key
  // scale/zero 8 B (per 64 tokens: 512 B), value codes 16 B + two value
  // groups' scale/zero 8 B: 48 of fp16's 512 B (0.094; 0.097 with the window).
  const auto sp = packed_kv_shape::make(parse_kv_mode("specache", 1, 64, 64), c, 1, 32768, 16, 0);
  EXPECT_NEAR(sp.packed_bytes_per_token() / (double(fp16_bytes(1, c.head_dim, c.num_key_value_heads,
                                                                    c.num_hidden_layers))),
              (16 + 8 + 16 + 8) / 512.0, 1e-12);
}

TEST(cuda_packed_kv, flush_rule_is_the_cpu_caches) {
  // quantized_tokens() is the CPU cache's state after one-at-a-time appends;
  // applying groups_due before each append must reach the same state.
  for (const std::int64_t group : {32, 64, 128})
    for (const std::int64_t flush_at : {group + 16, 2 * group}) {
      std::int64_t q = 0;
      for (std::int64_t len = 0; len < 2000; ++len) {  // append token `len`
        q += groups_due(len - q, flush_at, group) * group;
        ASSERT_EQ(q, quantized_tokens(len + 1, group, flush_at)) << "G " << group << " flush_at " << flush_at;
        ASSERT_LE(len + 1 - q, flush_at) << "the window never holds more than flush_at after an append";
      }
    }
}

TEST(cuda_packed_kv, refuses_what_the_gpu_kernels_cannot_read) {
  const auto c = *preset_config("llama3-8b");
  EXPECT_THROW(packed_kv_shape::make(kv_mode{}, c, 1, 1024, 16, -1), std::invalid_argument);
  EXPECT_THROW(packed_kv_shape::make(parse_kv_mode("kivi", 2, 16, 64), c, 1, 1024, 16, -1), std::invalid_argument);
  EXPECT_THROW(packed_kv_shape::make(parse_kv_mode("kivi", 2, 48, 64), c, 1, 1024, 16, -1), std::invalid_argument);
  // max_append is capped at G, so one forward never flushes more than one group.
  EXPECT_EQ(packed_kv_shape::make(parse_kv_mode("kivi", 2, 32, 8), c, 1, 1024, 100, -1).max_append, 32);
}

}  // namespace
}  // namespace specpipe

// The roofline's bytes: hier's INT4 read leaves the lower planes (half the
// codes) unread; every other mode reads what it stores.
namespace specpipe {
namespace {
TEST(cuda_packed_kv, read_bytes_skip_the_lower_planes_of_an_int4_read) {
  const model_config c = *preset_config("llama2-7b");
  const kv_mode int8 = parse_kv_mode("hier", 8, 128, 0), int4 = parse_kv_mode("hier", 4, 128, 0);
  const double stored = cuda_forward::kv_bytes_per_token(c, int8);
  EXPECT_DOUBLE_EQ(cuda_forward::kv_bytes_per_token(c, int4), stored);
  EXPECT_DOUBLE_EQ(cuda_forward::kv_read_bytes_per_token(c, int8), stored);
  // 32 layers x 32 KV heads x 128 channels x (K + V) x 4 bits.
  EXPECT_DOUBLE_EQ(stored - cuda_forward::kv_read_bytes_per_token(c, int4), 32.0 * 32 * 128);
  const kv_mode kivi2 = parse_kv_mode("kivi", 2, 64, 64);
  EXPECT_DOUBLE_EQ(cuda_forward::kv_read_bytes_per_token(c, kivi2), cuda_forward::kv_bytes_per_token(c, kivi2));
}
}  // namespace
}  // namespace specpipe
