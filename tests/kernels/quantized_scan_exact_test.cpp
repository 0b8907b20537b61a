// The CPU packed-code attention decodes each block's codes once per GQA group
// through byte tables; per (query, head) its arithmetic must stay that of the
// plain scan (quant_scan_reference.hpp), so outputs and probabilities are
// compared bit for bit: every format, GQA 1 to 8, head_dim 80 and 128, causal
// multi-query blocks that cut a group, replaced rows of every dtype in the
// packed part and the window, inline and on a pool (whose work items then
// split the GQA group).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "kernels/mixed_attention.hpp"
#include "kernels/quant_packed_fixture.hpp"
#include "kernels/quant_scan_reference.hpp"
#include "kernels/quantized_attention.hpp"

namespace specpipe {
namespace {

namespace kc = kernels::cpu;

struct scan_case {
  const char* name;
  kc::quant_rule rule;
  int bits;
  bool read_lower;
  std::int64_t group;
};

struct shape {
  std::int64_t heads, kv_heads, d;
};

// Bitwise equality, with the first differing element named.
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
      FAIL() << what << ": element " << i << " is " << got[i] << ", the plain scan gives " << want[i];
}

// Replaced positions per KV head, strictly increasing, some in the packed
// part (also inside a causally cut group) and some in the window.
std::vector<std::int64_t> replaced_positions(const test::packed_fixture& f, std::int64_t stride,
                                             std::vector<std::int64_t>& count) {
  std::vector<std::int64_t> pos(std::size_t(f.kv_heads * stride), 0);
  count.assign(std::size_t(f.kv_heads), 0);
  for (std::int64_t h = 0; h < f.kv_heads; ++h) {
    std::int64_t n = 0;
    for (std::int64_t j = h % 3; j < f.len() && n < stride; j += 7 + h) pos[std::size_t(h * stride + n++)] = j;
    count[std::size_t(h)] = h == 1 ? 0 : n;  // one head with no rows at all
  }
  return pos;
}

class QuantizedScanExact : public ::testing::TestWithParam<scan_case> {};

TEST_P(QuantizedScanExact, MatchesThePlainScanBitForBit) {
  const auto p = GetParam();
  kc::thread_pool pool(3);
  for (const shape s : {shape{6, 2, 80}, shape{8, 1, 128}, shape{4, 4, 80}, shape{16, 2, 128}}) {
    const std::uint64_t seed = test::default_seed + std::uint64_t(p.bits * 7 + p.group + s.heads * 3 + s.d);
    SCOPED_TRACE(test::seed_trace(seed) + ", heads " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) +
                 ", d " + std::to_string(s.d));
    test::packed_fixture f;
    f.heads = s.heads;
    f.kv_heads = s.kv_heads;
    f.d = s.d;
    f.rule = p.rule;
    f.bits = p.bits;
    f.read_lower = p.read_lower;
    f.group = p.group;
    f.groups = p.group >= 128 ? 2 : 3;
    f.window = 70;  // more than one 64-position window block
    f.build(seed);
    std::mt19937_64 rng(seed + 1);
    std::vector<std::int64_t> count;
    const std::int64_t stride = 24;
    const auto pos = replaced_positions(f, stride, count);
    std::vector<std::uint16_t> k16(std::size_t(f.kv_heads * stride * f.d)), v16(k16.size()), kb(k16.size()),
        vb(k16.size());
    const auto k32 = test::random_floats(rng, k16.size()), v32 = test::random_floats(rng, k16.size());
    for (std::size_t i = 0; i < k16.size(); ++i) {
      k16[i] = f32_to_f16(k32[i]);
      v16[i] = f32_to_f16(v32[i]);
      kb[i] = f32_to_bf16(k32[i]);
      vb[i] = f32_to_bf16(v32[i]);
    }
    const kc::mixed_rows row_sets[] = {{pos.data(), count.data(), stride, k16.data(), v16.data(), dtype::f16},
                                       {pos.data(), count.data(), stride, kb.data(), vb.data(), dtype::bf16},
                                       {pos.data(), count.data(), stride, k32.data(), v32.data(), dtype::f32}};
    // The window's end, a block cutting a packed group, the first position,
    // and (first shape only: the plain scan is slow) every position.
    const std::int64_t blocks[][2] = {{3, f.len() - 3}, {5, f.group + 9}, {1, 0}, {f.len(), 0}};
    for (const auto& b : blocks) {
      if (b[0] == f.len() && s.heads != 6) continue;
      const std::int64_t n = b[0], pos0 = b[1];
      const auto q = test::random_floats(rng, std::size_t(n * f.heads * f.d), -1.0f, 1.0f, 0.02);
      for (int rows_kind = -1; rows_kind < 3; ++rows_kind) {
        const kc::mixed_rows* rows = rows_kind < 0 ? nullptr : &row_sets[rows_kind];
        SCOPED_TRACE("n " + std::to_string(n) + " pos0 " + std::to_string(pos0) + ", rows " +
                     (rows ? std::string(dtype_name(rows->type)) : std::string("none")));
        std::vector<float> want(std::size_t(n * f.heads * f.d)), want_p(std::size_t(n * f.heads * f.len()), -1.0f);
        auto ra = f.args(q.data(), n, pos0, want.data());
        ra.probs = want_p.data();
        ra.probs_stride = f.len();
        test::ref_scan::ref_quantized_scan(ra, rows);
        for (kc::thread_pool* on : {static_cast<kc::thread_pool*>(nullptr), &pool}) {
          std::vector<float> got(want.size(), 7.0f), got_p(want_p.size(), -1.0f);
          auto a = f.args(q.data(), n, pos0, got.data());
          a.probs = got_p.data();
          a.probs_stride = f.len();
          if (rows)
            kc::mixed_attention(a, *rows, on);
          else
            kc::quantized_attention(a, on);
          const std::string where = on ? "on the pool" : "inline";
          expect_same_bits(got, want, "output, " + where);
          expect_same_bits(got_p, want_p, "probabilities, " + where);
          if (HasFatalFailure() || HasNonfatalFailure()) return;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, QuantizedScanExact,
    ::testing::Values(scan_case{"kivi1", kc::quant_rule::rtn, 1, false, 32},
                      scan_case{"kivi1_G64", kc::quant_rule::rtn, 1, false, 64},
                      scan_case{"specache1", kc::quant_rule::specache, 1, false, 64},
                      scan_case{"kivi2", kc::quant_rule::rtn, 2, false, 32},
                      scan_case{"kivi4_G128", kc::quant_rule::rtn, 4, false, 128},
                      scan_case{"hier_int4", kc::quant_rule::hier, 4, false, 128},
                      scan_case{"hier_int8", kc::quant_rule::hier, 4, true, 32},
                      scan_case{"hier_int8_G128", kc::quant_rule::hier, 4, true, 128}),
    [](const auto& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace specpipe
