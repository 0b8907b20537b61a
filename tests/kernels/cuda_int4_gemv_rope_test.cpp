// v7 over a qkv weight whose q and k rows are stored in RoPE pair order
// (int4_gemv_args::pair_rows, kernels::cpu::int4_rope_pair_row), and its
// RoPE-and-append epilogue (int4_gemv_args::rope), against the unfused path
// on the natural weight: v7 into bf16, then kernels::cuda::rope_append. Both
// must agree bit for bit: y in natural order without rope; y as rope_append
// leaves it (q rotated, k and v as computed) and every byte of both caches
// with it. Cases: MHA and GQA, head_dim 64 and 128, 1 to 8 rows, a ring
// cache, the input normalized in the GEMV, a group of two chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/int4_linear.hpp"
#include "kernels/int4_tiled.hpp"
#include "tests/kernels/cuda_test_util.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/int4_gemv.hpp"
#endif

namespace specpipe::test {
namespace {

class cuda_int4_gemv_rope : public cuda_test {};

TEST(int4_rope_pair_row, is_a_permutation_that_puts_each_pair_in_one_tile) {
  for (const std::int64_t hd : {16, 64, 128}) {
    const std::int64_t heads = 3, rows = heads * hd;
    std::vector<int> seen(std::size_t(rows), 0);
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int64_t nat = kernels::cpu::int4_rope_pair_row(i, hd);
      ASSERT_GE(nat, 0);
      ASSERT_LT(nat, rows);
      ++seen[std::size_t(nat)];
      EXPECT_EQ(nat / hd, i / hd) << "rows stay in their head";
      if (i % 16 < 8) {  // stored rows r and r + 8 of a tile: dims d and d + hd / 2
        EXPECT_EQ(kernels::cpu::int4_rope_pair_row(i + 8, hd), nat + hd / 2) << "hd " << hd << " row " << i;
      }
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; })) << "hd " << hd;
  }
}

#ifdef SPECPIPE_HAVE_CUDA
namespace kc = kernels::cuda;
namespace kcpu = kernels::cpu;

struct rope_case {
  std::int64_t m;
  int nh, nkv, hd;
  std::int64_t k, group;
  bool norm, ring;
  unsigned seed;
};

void run_rope_case(allocator& dev, const rope_case& rc) {
  std::mt19937 rng(rc.seed);
  const std::int64_t m = rc.m, k = rc.k, hd = rc.hd;
  const std::int64_t pair_rows = std::int64_t(rc.nh + rc.nkv) * hd, n = pair_rows + std::int64_t(rc.nkv) * hd;
  const std::int64_t ldx = k + 8, ldy = n + 8, cap = 40, slots = 3;
  const std::string what = "m=" + std::to_string(m) + " heads " + std::to_string(rc.nh) + "/" +
                           std::to_string(rc.nkv) + " hd=" + std::to_string(hd) + " k=" + std::to_string(k) +
                           " group=" + std::to_string(rc.group) + (rc.norm ? " norm" : "") + (rc.ring ? " ring" : "");
  SCOPED_TRACE(what);
  // The weight and its pair-ordered copy: rows quantize one by one, so the
  // copy's codes are the natural codes moved.
  const auto w = random_values(rng, std::size_t(n * k));
  std::vector<float> wp(w.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t src = i < pair_rows ? kcpu::int4_rope_pair_row(i, hd) : i;
    std::copy_n(w.begin() + src * k, k, wp.begin() + i * k);
  }
  const kcpu::int4_tiled_weights tn = kcpu::tile_int4(kcpu::quantize_int4(w.data(), dtype::f32, n, k, 0, rc.group).view());
  const kcpu::int4_tiled_weights tp =
      kcpu::tile_int4(kcpu::quantize_int4(wp.data(), dtype::f32, n, k, 0, rc.group).view());
  const auto x = round_bf16(random_values(rng, std::size_t(m * ldx)));
  auto residual = random_values(rng, std::size_t(m * k), 4.f);
  auto nweight = random_values(rng, std::size_t(k));
  for (auto& v : nweight) v = 1.f + 0.25f * v;
  // Distinct (slot, cache row) per token; positions past cap wrap in the ring.
  std::vector<std::int32_t> slot(static_cast<std::size_t>(m)), pos(static_cast<std::size_t>(m));
  for (std::int64_t t = 0; t < m; ++t) {
    slot[std::size_t(t)] = std::int32_t(t % slots);
    pos[std::size_t(t)] = std::int32_t(rc.ring ? 3 * cap + 7 * t + 1 : (7 * t + 1) % cap);
  }
  std::vector<float> inv(std::size_t(hd / 2));
  for (std::int64_t i = 0; i < hd / 2; ++i) inv[std::size_t(i)] = float(std::pow(10000.0, -2.0 * double(i) / double(hd)));

  dev_array<std::uint16_t> dx(dev, to_bf16(x));
  dev_array<float> dres(dev, residual), dnw(dev, nweight), dinv(dev, inv);
  dev_array<std::uint8_t> cn(dev, tn.codes), cp(dev, tp.codes);
  dev_array<std::uint16_t> szn(dev, tn.scale_zero), szp(dev, tp.scale_zero);
  dev_array<std::int32_t> dslot(dev, slot), dpos(dev, pos);
  const std::size_t cache_n = std::size_t(slots * rc.nkv * cap * hd);
  dev_array<std::uint16_t> y_plain(dev, std::size_t(m * ldy)), y_pairs(dev, std::size_t(m * ldy)),
      y_fused(dev, std::size_t(m * ldy));
  dev_array<std::uint16_t> k_plain(dev, cache_n), v_plain(dev, cache_n), k_fused(dev, cache_n), v_fused(dev, cache_n);

  kc::int4_gemv_args a;
  a.version = 7;
  a.x = dx.get();
  a.ldx = ldx;
  a.group = rc.group;
  a.ldy = ldy;
  a.out = kc::gemm_out::bf16;
  a.m = m;
  a.n = n;
  a.k = k;
  a.dependent = true;
  if (rc.norm) {
    a.norm.x = dres.get();
    a.norm.ld = k;
    a.norm.weight = dnw.get();
  }
  kc::rope_append_args ra;
  ra.ld_qkv = ldy;
  ra.capacity = cap;
  ra.ring = rc.ring ? cap : 0;
  ra.slots = dslot.get();
  ra.positions = dpos.get();
  ra.inv_freq = dinv.get();
  ra.tokens = m;
  ra.n_heads = rc.nh;
  ra.n_kv_heads = rc.nkv;
  ra.head_dim = rc.hd;

  // Unfused, on the natural weight.
  a.codes = cn.get();
  a.scale_zero = szn.get();
  a.y = y_plain.get();
  kc::int4_gemv(a, nullptr);
  const auto y_natural = y_plain.download();
  ra.qkv = y_plain.get();
  ra.k_cache = k_plain.get();
  ra.v_cache = v_plain.get();
  kc::rope_append(ra, nullptr);
  // The pair-ordered weight, written in natural order, no epilogue.
  a.codes = cp.get();
  a.scale_zero = szp.get();
  a.pair_rows = pair_rows;
  a.pair_head_dim = rc.hd;
  a.y = y_pairs.get();
  kc::int4_gemv(a, nullptr);
  // And with RoPE and the append as its epilogue.
  ra.qkv = nullptr;  // not read
  ra.k_cache = k_fused.get();
  ra.v_cache = v_fused.get();
  a.rope = &ra;
  a.y = y_fused.get();
  kc::int4_gemv(a, nullptr);

  const auto yp = y_pairs.download();
  EXPECT_TRUE(yp == y_natural) << "pair order without rope: y differs from the natural weight's";
  EXPECT_EQ(std::count(y_natural.begin(), y_natural.end(), std::uint16_t(0xffff)),
            std::ptrdiff_t(m * (ldy - n)))
      << "the outputs were written (only the rows' padding keeps the poison)";
  const auto yf = y_fused.download(), yu = y_plain.download();
  int bad = 0;
  for (std::size_t i = 0; i < yu.size(); ++i)
    if (yf[i] != yu[i] && bad++ < 5)
      ADD_FAILURE() << "y element " << i << " (row " << i / std::size_t(ldy) << ", column " << i % std::size_t(ldy)
                    << "): fused " << yf[i] << ", unfused " << yu[i];
  EXPECT_EQ(bad, 0) << "fused y differs from rope_append's in " << bad << " elements";
  EXPECT_TRUE(k_fused.download() == k_plain.download()) << "k cache differs";
  EXPECT_TRUE(v_fused.download() == v_plain.download()) << "v cache differs";
  const auto kc_all = k_plain.download();
  EXPECT_GE(std::count_if(kc_all.begin(), kc_all.end(), [](std::uint16_t b) { return b != 0xffff; }),
            std::ptrdiff_t(m * rc.nkv * hd) - 1)
      << "the append wrote the cache";
  EXPECT_TRUE(y_fused.sentinel_intact() && k_fused.sentinel_intact() && v_fused.sentinel_intact());
}

TEST_F(cuda_int4_gemv_rope, the_epilogue_gives_rope_appends_bits) {
  run_rope_case(*dev_, {1, 32, 32, 128, 1024, 128, true, true, 901});   // llama2-7b's heads, one row
  run_rope_case(*dev_, {5, 8, 2, 128, 1024, 128, false, false, 902});   // GQA, 5 rows
  run_rope_case(*dev_, {8, 4, 2, 64, 512, 256, true, false, 903});      // head_dim 64, group of 2 chunks
  run_rope_case(*dev_, {3, 4, 4, 64, 256, 128, false, true, 904});
}

// The call throws std::invalid_argument naming the pair order or the RoPE
// epilogue (not some other field: these calls are valid but for it).
void expect_refused(const kc::int4_gemv_args& a, const char* why) {
  try {
    kc::int4_gemv(a, nullptr);
    ADD_FAILURE() << why << ": accepted";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(msg.find("pair_rows") != std::string::npos || msg.find("(rope)") != std::string::npos)
        << why << ": " << msg;
  }
}

TEST_F(cuda_int4_gemv_rope, bad_pair_and_rope_arguments_are_refused) {
  alignas(16) std::uint8_t dummy[64] = {};
  alignas(16) static std::int32_t ints[8];
  alignas(16) static float freq[64];
  kc::int4_gemv_args a;
  a.version = 7;
  a.m = 1;
  a.n = (4 + 2 * 2) * 64;
  a.k = 128;
  a.ldx = 128;
  a.ldy = a.n;
  a.x = reinterpret_cast<const std::uint16_t*>(dummy);
  a.codes = dummy;
  a.scale_zero = reinterpret_cast<const std::uint16_t*>(dummy);
  a.y = dummy;
  a.pair_rows = 6 * 64;
  a.pair_head_dim = 40;  // not a multiple of 16
  expect_refused(a, "head_dim 40");
  a.pair_head_dim = 64;
  a.out = kc::gemm_out::f32;
  expect_refused(a, "f32 output");
  a.out = kc::gemm_out::bf16;
  a.version = 2;  // the row layout has no pair order
  a.code_stride = 64;
  a.scale = a.zero = reinterpret_cast<const std::uint16_t*>(dummy);
  a.scale_zero = nullptr;
  expect_refused(a, "the row layout");
  a.version = 7;
  a.scale = a.zero = nullptr;
  a.scale_zero = reinterpret_cast<const std::uint16_t*>(dummy);
  kc::rope_append_args r;
  r.k_cache = r.v_cache = reinterpret_cast<std::uint16_t*>(dummy);
  r.slots = r.positions = ints;
  r.inv_freq = freq;
  r.capacity = 16;
  r.n_heads = 4;
  r.n_kv_heads = 2;
  r.head_dim = 64;
  a.rope = &r;
  a.n -= 64;  // not (n_heads + 2 n_kv_heads) head_dim
  a.ldy = a.n;
  expect_refused(a, "n not a qkv weight's");
  a.n += 64;
  a.ldy = a.n;
  r.inv_freq = nullptr;
  expect_refused(a, "no inv_freq");
  r.inv_freq = freq;
  a.pair_rows = 0;  // rope needs the pair order
  expect_refused(a, "rope without pair order");
}
#else
TEST_F(cuda_int4_gemv_rope, skipped_without_cuda) {}
#endif

}  // namespace
}  // namespace specpipe::test
