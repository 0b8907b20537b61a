// CUDA GQA top-k (kernels/cuda/topk.hpp) against cpu::topk_gqa: the same
// positions in the same order, with many exact ties (probabilities on a
// coarse grid, and all-equal rows), an excluded position, k from 1 to more
// than the eligible positions, rows of different lengths, keys that differ
// only in their low bits, each with both first radix digits; and from raw
// scores plus the combine's (max, sum), against the CPU on the probabilities
// the GPU's own normalization writes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_test_util.hpp"
#include "kernels/topk.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/packed_attention.hpp"
#include "kernels/cuda/topk.hpp"
#endif

namespace specpipe::test {
namespace {

class cuda_topk : public cuda_test {};

#ifdef SPECPIPE_HAVE_CUDA
namespace kcpu = kernels::cpu;
namespace kc = kernels::cuda;

struct row_case {
  int len, exclude;
};

// CPU top-k of each row of `probs` ([rows][heads][stride]).
void cpu_topk(const std::vector<float>& probs, const std::vector<row_case>& rows, int heads, int kv, int stride, int k,
              std::vector<std::vector<std::int64_t>>& pos, std::vector<std::vector<std::int64_t>>& cnt) {
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::vector<std::int64_t> p(static_cast<std::size_t>(kv * k)), c(static_cast<std::size_t>(kv));
    std::vector<float> ss(static_cast<std::size_t>(stride));
    std::vector<std::int64_t> si(static_cast<std::size_t>(stride));
    kcpu::topk_args a;
    a.probs = probs.data() + r * std::size_t(heads * stride);
    a.probs_stride = stride;
    a.len = rows[r].len;
    a.n_heads = heads;
    a.n_kv_heads = kv;
    a.k = k;
    a.exclude = rows[r].exclude;
    a.positions = p.data();
    a.count = c.data();
    a.scratch_scores = ss.data();
    a.scratch_index = si.data();
    kcpu::topk_gqa(a);
    pos.push_back(p);
    cnt.push_back(c);
  }
}

void compare(const std::vector<std::int32_t>& gpos, const std::vector<std::int32_t>& gcnt,
             const std::vector<std::vector<std::int64_t>>& pos, const std::vector<std::vector<std::int64_t>>& cnt,
             int kv, int k, const std::string& what) {
  for (std::size_t r = 0; r < pos.size(); ++r)
    for (int g = 0; g < kv; ++g) {
      const std::int64_t c = cnt[r][std::size_t(g)];
      ASSERT_EQ(gcnt[r * std::size_t(kv) + std::size_t(g)], c) << what << ": count of row " << r << " head " << g;
      for (std::int64_t i = 0; i < c; ++i)
        ASSERT_EQ(gpos[(r * std::size_t(kv) + std::size_t(g)) * std::size_t(k) + std::size_t(i)],
                  pos[r][std::size_t(g * k + i)])
            << what << ": row " << r << " head " << g << " rank " << i;
    }
}

// The launch arguments over device arrays: rows of `stride` values per head,
// their lengths and excluded positions, k positions and a count out.
kc::topk_args device_args(const float* values, int stride, const std::int32_t* len, const std::int32_t* exclude,
                          int rows, int heads, int kv, int k, std::int32_t* positions, std::int32_t* count,
                          float* scratch) {
  kc::topk_args a;
  a.values = values;
  a.stride = stride;
  a.row_len = len;
  a.row_exclude = exclude;
  a.rows = rows;
  a.n_heads = heads;
  a.n_kv_heads = kv;
  a.k = k;
  a.positions = positions;
  a.count = count;
  a.scratch = scratch;
  a.max_len = stride;
  return a;
}

void ties_and_exclusions(allocator& dev, int stride, const std::vector<row_case>& rows, unsigned seed,
                         int heads = 8, int kv = 2) {
  std::mt19937 rng(seed);
  // 0: continuous values; > 0: probabilities on a grid of 1/grid (ties);
  // -1: values that differ only in their lowest 9 bits (the radix passes
  // start at bit 8, the last one reaching into bits all keys share).
  for (const int grid : {0, 8, 64, -1}) {
    std::vector<float> probs(rows.size() * std::size_t(heads * stride), 0.f);
    std::uniform_real_distribution<float> u(0.f, 1.f);
    for (std::size_t r = 0; r < rows.size(); ++r)
      for (int h = 0; h < heads; ++h)
        for (int j = 0; j < rows[r].len; ++j) {
          float x = u(rng);
          if (grid > 0) x = std::floor(x * float(grid)) / float(grid);
          if (grid < 0) {
            const std::uint32_t bits = 0x3e800000u + std::uint32_t(rng() % 300u);
            std::memcpy(&x, &bits, 4);
          }
          if (r == 1 && h < 4) x = 0.25f;  // all-equal group for KV head 0
          probs[(r * heads + std::size_t(h)) * stride + std::size_t(j)] = x / float(rows[r].len);
        }
    std::vector<std::int32_t> len_h, ex_h;
    for (const auto& rc : rows) {
      len_h.push_back(rc.len);
      ex_h.push_back(rc.exclude);
    }
    dev_array<float> pd(dev, probs);
    dev_array<std::int32_t> ld(dev, len_h), ed(dev, ex_h);
    dev_array<float> scratch(dev, kc::topk_scratch_floats(int(rows.size()), kv, stride));
    for (const int k : {1, 5, 64, 1024})
      for (const bool fixed : {false, true}) {
        const std::string what =
            "grid " + std::to_string(grid) + " k " + std::to_string(k) + (fixed ? ", fixed digits" : "");
        SCOPED_TRACE(what);
        std::vector<std::vector<std::int64_t>> pos, cnt;
        cpu_topk(probs, rows, heads, kv, stride, k, pos, cnt);
        dev_array<std::int32_t> gp(dev, rows.size() * std::size_t(kv * k)), gc(dev, rows.size() * std::size_t(kv));
        kc::topk_args a = device_args(pd.get(), stride, ld.get(), ed.get(), int(rows.size()), heads, kv, k, gp.get(),
                                      gc.get(), scratch.get());
        a.fixed_digits = fixed;
        kc::topk_gqa(a, nullptr);
        compare(gp.download(), gc.download(), pos, cnt, kv, k, what);
        EXPECT_TRUE(gp.sentinel_intact() && gc.sentinel_intact());
      }
  }
}

TEST_F(cuda_topk, matches_cpu_with_ties_and_exclusions) {
  ties_and_exclusions(*dev_, 1100, {{1024, -1}, {1100, 10}, {37, 36}, {1, 0}, {600, 599}}, 3000);
}

// Rows over many 2048-position chunks of the first stage: ties that span
// chunks (the lowest positions must win across them), exclusions at chunk
// edges, rows ending exactly on and just past a chunk.
TEST_F(cuda_topk, long_rows_across_chunks) {
  ties_and_exclusions(*dev_, 20000, {{20000, -1}, {19999, 4097}, {2049, 2048}, {4096, 0}, {7000, 6143}}, 3050);
}

// Groups of three and five heads (28 / 4 = 7 in some models): 1 / group is
// inexact, so ranking by the group's mean in f32 would tie distinct sums
// that the CPU, which ranks by the sum, keeps apart; on the grid of
// probabilities the ties then went to the lower position.
TEST_F(cuda_topk, groups_of_three_and_five_rank_like_the_cpu) {
  ties_and_exclusions(*dev_, 9000, {{9000, 4095}, {4097, -1}, {300, 3}}, 3070, 6, 2);
  ties_and_exclusions(*dev_, 5000, {{5000, 2047}, {1, 0}}, 3080, 5, 1);
}

TEST_F(cuda_topk, from_raw_scores_and_the_combine_statistics) {
  const int heads = 32, kv = 8, stride = 2000, k = 64;
  const std::vector<row_case> rows = {{2000, 1999}, {777, -1}};
  std::mt19937 rng(3100);
  std::normal_distribution<float> n01(0.f, 3.f);
  std::vector<float> scores(rows.size() * std::size_t(heads * stride), 0.f), ml(rows.size() * std::size_t(heads * 2));
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (int h = 0; h < heads; ++h) {
      float m = -INFINITY;
      for (int j = 0; j < rows[r].len; ++j) {
        const float s = n01(rng);
        scores[(r * heads + std::size_t(h)) * stride + std::size_t(j)] = s;
        m = std::max(m, s);
      }
      double l = 0;
      for (int j = 0; j < rows[r].len; ++j) l += std::exp2(double(scores[(r * heads + std::size_t(h)) * stride + std::size_t(j)] - m));
      ml[(r * heads + std::size_t(h)) * 2] = m;
      ml[(r * heads + std::size_t(h)) * 2 + 1] = float(l);
    }
  std::vector<std::int32_t> len_h, ex_h, row_h;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    len_h.push_back(rows[r].len);
    ex_h.push_back(rows[r].exclude);
    row_h.push_back(std::int32_t(r));
  }
  dev_array<float> sd(*dev_, scores), mld(*dev_, ml), probs(*dev_, scores.size(), 0);
  dev_array<std::int32_t> ld(*dev_, len_h), ed(*dev_, ex_h), rd(*dev_, row_h);
  // The GPU's probabilities (what a caller asking for them would get) ...
  kc::packed_attention_probs(sd.get(), probs.get(), stride, mld.get(), rd.get(), ld.get(), int(rows.size()), heads,
                             nullptr);
  std::vector<std::vector<std::int64_t>> pos, cnt;
  cpu_topk(probs.download(), rows, heads, kv, stride, k, pos, cnt);
  // ... and the top-k straight from the scores.
  dev_array<float> scratch(*dev_, kc::topk_scratch_floats(int(rows.size()), kv, stride));
  dev_array<std::int32_t> gp(*dev_, rows.size() * std::size_t(kv * k)), gc(*dev_, rows.size() * std::size_t(kv));
  kc::topk_args a = device_args(sd.get(), stride, ld.get(), ed.get(), int(rows.size()), heads, kv, k, gp.get(),
                                gc.get(), scratch.get());
  a.ml = mld.get();
  kc::topk_gqa(a, nullptr);
  compare(gp.download(), gc.download(), pos, cnt, kv, k, "from scores");
  // The same statistics interleaved with another entry's (SpeCache's real
  // and speculative rows alternate in the attention's ml output).
  std::vector<float> ml2(ml.size() * 2, -1e30f);
  for (std::size_t r = 0; r < rows.size(); ++r)
    std::copy(ml.begin() + std::ptrdiff_t(r * heads * 2), ml.begin() + std::ptrdiff_t((r + 1) * heads * 2),
              ml2.begin() + std::ptrdiff_t((2 * r + 1) * heads * 2));
  dev_array<float> ml2d(*dev_, ml2);
  dev_array<std::int32_t> gp2(*dev_, gp.n_), gc2(*dev_, gc.n_);
  a.ml = ml2d.get() + heads * 2;
  a.ml_row_stride = 4 * heads;
  a.positions = gp2.get();
  a.count = gc2.get();
  kc::topk_gqa(a, nullptr);
  compare(gp2.download(), gc2.download(), pos, cnt, kv, k, "from scores, strided statistics");
}
#endif

TEST_F(cuda_topk, rejects_bad_arguments) {
#ifdef SPECPIPE_HAVE_CUDA
  kc::topk_args a;
  a.rows = 1;
  a.n_heads = 6;
  a.n_kv_heads = 4;
  EXPECT_THROW(kc::topk_gqa(a, nullptr), std::invalid_argument);
  a.n_kv_heads = 2;
  a.k = kc::topk_max_k + 1;
  EXPECT_THROW(kc::topk_gqa(a, nullptr), std::invalid_argument);
#endif
}

}  // namespace
}  // namespace specpipe::test
