// The projections: cuBLAS and the decode GEMV against a double reference,
// bf16, f32 and SwiGLU outputs, with the fused residual accumulate.
#include <gtest/gtest.h>

#include "tests/kernels/cuda_test_util.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gemm.hpp"
#endif

namespace specpipe::test {
namespace {

class cuda_gemm : public cuda_test {};

#ifdef SPECPIPE_HAVE_CUDA
namespace kc = kernels::cuda;

// out swiglu: W is [gate; up] (n even) and y [m, n / 2] = silu(g) * u of
// the product's halves, each rounded to bf16 first (gemm_out::swiglu). pdl:
// launched as a programmatic dependent of the previous kernel
// (overlap_launch). unroll, k_split: the GEMV shape (gemm_args; v1 is 2
// without k-split).
void run_case(allocator& dev, kc::blas_handle& blas, kc::gemm_impl impl, std::int64_t m, std::int64_t n,
              std::int64_t k, kc::gemm_out out, bool acc, unsigned seed, bool pdl = false,
              int unroll = kc::gemv_default_unroll, bool k_split = true) {
  std::mt19937 rng(seed);
  const bool glu = out == kc::gemm_out::swiglu;
  const std::int64_t ycols = glu ? n / 2 : n;
  const std::int64_t ldx = k + 8, ldw = k + 16, ldy = ycols + 3;
  auto x = round_bf16(random_values(rng, std::size_t(m * ldx)));
  auto w = round_bf16(random_values(rng, std::size_t(n * ldw)));
  auto y0 = random_values(rng, std::size_t(m * ldy));
  dev_array<std::uint16_t> dx(dev, to_bf16(x)), dw(dev, to_bf16(w));
  dev_array<float> dyf(dev, y0);
  dev_array<std::uint16_t> dyb(dev, std::size_t(m * ldy));
  kc::gemm_args a;
  a.x = dx.get();
  a.ldx = ldx;
  a.w = dw.get();
  a.ldw = ldw;
  a.y = out == kc::gemm_out::f32 ? static_cast<void*>(dyf.get()) : static_cast<void*>(dyb.get());
  a.ldy = ldy;
  a.out = out;
  a.accumulate = acc;
  a.overlap_launch = pdl;
  a.unroll = unroll;
  a.k_split = k_split;
  a.m = m;
  a.n = n;
  a.k = k;
  kc::gemm(blas.get(), a, nullptr, impl);
  std::vector<float> got;
  std::vector<double> ref;
  const auto yf = dyf.download();
  const auto yb = from_bf16(dyb.download());
  const auto dot = [&](std::int64_t i, std::int64_t j) {
    double s = 0.0;
    for (std::int64_t c = 0; c < k; ++c) s += double(x[std::size_t(i * ldx + c)]) * w[std::size_t(j * ldw + c)];
    return s;
  };
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < ycols; ++j) {
      double s = acc ? double(y0[std::size_t(i * ldy + j)]) : 0.0;
      if (glu) {
        const double g = dot(i, j), u = dot(i, j + ycols);
        s = g / (1.0 + std::exp(-g)) * u;
      } else {
        s += dot(i, j);
      }
      ref.push_back(s);
      got.push_back(out == kc::gemm_out::f32 ? yf[std::size_t(i * ldy + j)] : yb[std::size_t(i * ldy + j)]);
    }
  const std::string what = "gemm impl " + std::to_string(int(impl)) + " m=" + std::to_string(m) + " n=" +
                           std::to_string(n) + " k=" + std::to_string(k) + (acc ? " acc" : "") +
                           (glu ? " swiglu" : "") + (pdl ? " pdl" : "") + " unroll " + std::to_string(unroll) +
                           (k_split ? "" : " no-ksplit");
  if (out == kc::gemm_out::f32) expect_close(got, ref, 2e-3, 1e-3, what, seed);
  else expect_close(got, ref, glu ? 3e-2 : 2e-2, 1e-2, what, seed);  // swiglu: three bf16 roundings
  EXPECT_TRUE(dyf.sentinel_intact() && dyb.sentinel_intact()) << what;
}

// The SwiGLU output against the bf16 GEMV followed by the SwiGLU kernel, bit
// for bit: the decode step may take either path.
void check_swiglu_bits(allocator& dev, std::int64_t m, std::int64_t inter, std::int64_t k, unsigned seed) {
  std::mt19937 rng(seed);
  auto x = to_bf16(random_values(rng, std::size_t(m * k)));
  auto w = to_bf16(random_values(rng, std::size_t(2 * inter * k)));
  dev_array<std::uint16_t> dx(dev, x), dw(dev, w), gu(dev, std::size_t(m * 2 * inter)),
      act(dev, std::size_t(m * inter)), fused(dev, std::size_t(m * inter));
  kc::gemm_args a;
  a.x = dx.get();
  a.ldx = k;
  a.w = dw.get();
  a.ldw = k;
  a.m = m;
  a.n = 2 * inter;
  a.k = k;
  a.y = gu.get();
  a.ldy = 2 * inter;
  kc::gemv(a, nullptr);
  kc::swiglu(gu.get(), 2 * inter, act.get(), inter, m, inter, nullptr);
  a.out = kc::gemm_out::swiglu;
  a.y = fused.get();
  a.ldy = inter;
  kc::gemv(a, nullptr);
  const auto want = act.download(), got = fused.download();
  std::size_t differ = 0;
  for (std::size_t i = 0; i < want.size(); ++i) differ += want[i] != got[i];
  EXPECT_EQ(differ, 0u) << "m=" << m << " inter=" << inter << " k=" << k << ": " << differ << " of " << want.size()
                        << " SwiGLU outputs differ from the two-kernel path";
}

TEST_F(cuda_gemm, gemv_matches_reference_for_decode_batches) {
  kc::blas_handle blas;
  unsigned seed = 100;
  for (const std::int64_t m : {1, 2, 3, 5, 8})
    for (const std::int64_t k : {8, 264, 520, 2048}) {
      run_case(*dev_, blas, kc::gemm_impl::gemv, m, 77, k, kc::gemm_out::bf16, false, ++seed);
      run_case(*dev_, blas, kc::gemm_impl::gemv, m, 33, k, kc::gemm_out::f32, true, ++seed);
    }
}

// k up to 4104 (not a multiple of the 256-element step) with n small enough
// that the rows alone cannot fill the machine: the k-split plans (2, 4, 8
// warps per row pair) with a ragged last slice, and partial row pairs.
TEST_F(cuda_gemm, gemv_k_split_swiglu_and_overlapped_launch) {
  kc::blas_handle blas;
  unsigned seed = 150;
  for (const std::int64_t m : {1, 2, 4, 7})
    for (const std::int64_t k : {1032, 4104, 8200}) {
      run_case(*dev_, blas, kc::gemm_impl::gemv, m, 61, k, kc::gemm_out::bf16, false, ++seed, true);
      run_case(*dev_, blas, kc::gemm_impl::gemv, m, 46, k, kc::gemm_out::swiglu, false, ++seed, false);
      run_case(*dev_, blas, kc::gemm_impl::gemv, m, 46, k, kc::gemm_out::swiglu, false, ++seed, true);
    }
  // The automatic rule sends the SwiGLU output to the GEMV at any m <= 8.
  run_case(*dev_, blas, kc::gemm_impl::automatic, 6, 40, 264, kc::gemm_out::swiglu, false, ++seed);
  check_swiglu_bits(*dev_, 1, 1000, 4096, ++seed);
  check_swiglu_bits(*dev_, 2, 77, 1032, ++seed);
  check_swiglu_bits(*dev_, 5, 64, 264, ++seed);
}

// Every GEMV shape the decode step can be switched to (loads in flight 2 or
// 4, with and without the k-split), plain and fused input, ragged k and n.
TEST_F(cuda_gemm, gemv_unroll_and_k_split_variants) {
  kc::blas_handle blas;
  unsigned seed = 170;
  for (const int unroll : {2, 4})
    for (const bool k_split : {true, false})
      for (const std::int64_t m : {1, 2, 5})
        for (const std::int64_t k : {264, 4104}) {
          run_case(*dev_, blas, kc::gemm_impl::gemv, m, 61, k, kc::gemm_out::bf16, false, ++seed, false, unroll,
                   k_split);
          run_case(*dev_, blas, kc::gemm_impl::gemv, m, 45, k, kc::gemm_out::f32, true, ++seed, true, unroll,
                   k_split);
          run_case(*dev_, blas, kc::gemm_impl::gemv, m, 46, k, kc::gemm_out::swiglu, false, ++seed, true, unroll,
                   k_split);
        }
  kc::gemm_args a;
  a.m = 1;
  a.n = 4096;
  a.k = 4096;
  a.ldx = a.ldw = a.ldy = 4096;
  a.x = a.w = reinterpret_cast<const std::uint16_t*>(std::uintptr_t(256));
  a.k_split = false;
  EXPECT_EQ(kc::gemv_planned_k_split(a), 1);
  a.k_split = true;
  EXPECT_EQ(kc::gemv_planned_k_split(a), kc::gemv_k_split(a.n, a.k, kc::gemv_resident_blocks(a)));
}

TEST_F(cuda_gemm, cublas_matches_reference) {
  kc::blas_handle blas;
  unsigned seed = 200;
  for (const std::int64_t m : {1, 9, 37}) {
    run_case(*dev_, blas, kc::gemm_impl::cublas, m, 130, 200, kc::gemm_out::bf16, false, ++seed);
    run_case(*dev_, blas, kc::gemm_impl::cublas, m, 64, 96, kc::gemm_out::f32, true, ++seed);
    run_case(*dev_, blas, kc::gemm_impl::automatic, m, 64, 96, kc::gemm_out::f32, false, ++seed);
  }
}

TEST_F(cuda_gemm, gemv_rejects_what_it_cannot_run) {
  kc::gemm_args a;
  a.m = 9;
  a.n = 4;
  a.k = 16;
  a.ldx = a.ldw = 16;
  a.ldy = 4;
  EXPECT_FALSE(kc::gemv_supported(a));
  EXPECT_THROW(kc::gemv(a, nullptr), std::invalid_argument);
}
// Host-only: the unroll is checked before anything reaches the device.
TEST(cuda_gemm_plan, gemv_rejects_an_unknown_unroll) {
  kc::gemm_args a;
  a.m = 1;
  a.n = 4;
  a.k = 16;
  a.ldx = a.ldw = 16;
  a.ldy = 4;
  a.x = a.w = reinterpret_cast<const std::uint16_t*>(std::uintptr_t(256));
  a.unroll = 3;
  try {
    kc::gemv(a, nullptr);
    ADD_FAILURE() << "unroll 3 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unroll"), std::string::npos) << e.what();
  }
}
// Host-only planning: no device needed.
TEST(cuda_gemm_plan, dispatch_rule_and_k_split) {
  for (std::int64_t m = 1; m <= 8; ++m) {
    kc::gemm_args a;
    a.m = m;
    a.n = 4096;
    a.k = 4096;
    a.ldx = a.ldw = 4096;
    a.ldy = 4096;
    a.x = a.w = reinterpret_cast<const std::uint16_t*>(std::uintptr_t(256));
    EXPECT_EQ(kc::gemm_resolve(a, kc::gemm_impl::automatic), m <= 2 ? kc::gemm_impl::gemv : kc::gemm_impl::cublas)
        << "m=" << m;
    a.out = kc::gemm_out::swiglu;
    EXPECT_EQ(kc::gemm_resolve(a, kc::gemm_impl::automatic), kc::gemm_impl::gemv) << "m=" << m;
  }
  // llama3-8b shapes with 132 SMs x 8 resident blocks: the qkv and o/down
  // projections split k until the grid is one full wave; gate/up and
  // lm_head already fill it with whole rows.
  const int resident = 132 * 8;
  EXPECT_EQ(kc::gemv_k_split(6144, 4096, resident), 2);
  EXPECT_EQ(kc::gemv_k_split(4096, 4096, resident), 4);
  EXPECT_EQ(kc::gemv_k_split(4096, 14336, resident), 4);
  EXPECT_EQ(kc::gemv_k_split(28672, 4096, resident), 1);
  EXPECT_EQ(kc::gemv_k_split(128256, 4096, resident), 1);
  EXPECT_EQ(kc::gemv_k_split(64, 256, resident), 1);  // a slice keeps two loads per lane
}
#else
TEST_F(cuda_gemm, skipped_without_cuda) {}
#endif

}  // namespace
}  // namespace specpipe::test
