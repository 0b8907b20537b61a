// The draft's 4-bit weight GEMV on the GPU against the CPU reference
// (kernels::cpu::int4_linear) on the same packed bytes: decode batches 1..8,
// bf16 and f32 outputs, the fused residual accumulate, odd row counts. Every
// case also runs versions 7 and 9 over the tiled copy, repacked on the device
// (kernels::cuda::int4_tile, checked byte for byte against
// kernels::cpu::tile_int4 on the way); v9 runs v7 where it does not fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/int4_linear.hpp"
#include "kernels/int4_tiled.hpp"
#include "tests/kernels/cuda_test_util.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/int4_gemv.hpp"
#include "kernels/cuda/int4_gemv_bulk.hpp"
#include "kernels/cuda/int4_tiled.hpp"
#endif

namespace specpipe::test {
namespace {

class cuda_int4_gemv : public cuda_test {};

#ifdef SPECPIPE_HAVE_CUDA
namespace kc = kernels::cuda;
namespace kcpu = kernels::cpu;

// Random weights [n][k] (in [-1, 1] with outliers up to 8) quantized in
// groups, bf16-exact inputs [m][ldx], and the CPU reference's y [m][n] on them.
struct reference_case {
  kcpu::int4_weights q;
  std::vector<float> x, y;
};

reference_case make_reference_case(std::mt19937& rng, std::int64_t m, std::int64_t n, std::int64_t k,
                                   std::int64_t group, std::int64_t ldx) {
  const auto w = random_values(rng, std::size_t(n * k));
  reference_case c{kcpu::quantize_int4(w.data(), dtype::f32, n, k, 0, group),
                   round_bf16(random_values(rng, std::size_t(m * ldx))), std::vector<float>(std::size_t(m * n))};
  kcpu::int4_linear_args ra;
  ra.x = c.x.data();
  ra.x_stride = ldx;
  ra.w = c.q.view();
  ra.y = c.y.data();
  ra.n = m;
  kcpu::int4_linear(ra);
  return c;
}

void run_case(allocator& dev, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t group, kc::gemm_out out,
              bool acc, unsigned seed, std::initializer_list<int> versions = {1, 2, 3, 4, 7, 9}) {
  std::mt19937 rng(seed);
  const std::int64_t ldx = k + 8, ldy = n + 3;
  const reference_case c = make_reference_case(rng, m, n, k, group, ldx);
  const kcpu::int4_weights& q = c.q;
  const std::vector<float>& x = c.x;
  const std::vector<float>& ref_y = c.y;
  const auto y0 = random_values(rng, std::size_t(m * ldy));

  // Every version on the same inputs (v2, v3 and v4 where k and group are
  // multiples of 128, else they fall back to v1; v7 and v9 on the tiled
  // copy).
  const kcpu::int4_tiled_weights tq = kcpu::tile_int4(q.view());
  for (const int version : versions) {
    dev_array<std::uint16_t> dx(dev, to_bf16(x));
    dev_array<std::uint8_t> dcodes(dev, q.codes);
    dev_array<std::uint16_t> dscale(dev, q.scale), dzero(dev, q.zero);
    dev_array<float> dyf(dev, y0);
    dev_array<std::uint16_t> dyb(dev, std::size_t(m * ldy));
    // Poisoned, so the repack must write every byte.
    dev_array<std::uint8_t> dtcodes(dev, tq.codes.size());
    dev_array<std::uint16_t> dtsz(dev, tq.scale_zero.size());
    kc::int4_gemv_args a;
    a.version = version;
    a.x = dx.get();
    a.ldx = ldx;
    if (kc::int4_gemv_layout(version) == kc::int4_layout::tiles) {
      kc::int4_tile_args ta;
      ta.codes = dcodes.get();
      ta.code_stride = q.code_stride;
      ta.scale = dscale.get();
      ta.zero = dzero.get();
      ta.out = n;
      ta.in = k;
      ta.group = group;
      ta.tiled_codes = dtcodes.get();
      ta.tiled_scale_zero = dtsz.get();
      kc::int4_tile(ta, nullptr);
      // (cuda_int4_tiled_test.cpp says where a difference is.)
      ASSERT_TRUE(dtcodes.download() == tq.codes) << "int4_tile codes n=" << n << " k=" << k << " group=" << group;
      ASSERT_TRUE(dtsz.download() == tq.scale_zero)
          << "int4_tile scale_zero n=" << n << " k=" << k << " group=" << group;
      ASSERT_TRUE(dtcodes.sentinel_intact() && dtsz.sentinel_intact()) << "int4_tile wrote past its outputs";
      a.codes = dtcodes.get();
      a.scale_zero = dtsz.get();
    } else {
      a.codes = dcodes.get();
      a.code_stride = q.code_stride;
      a.scale = dscale.get();
      a.zero = dzero.get();
    }
    a.group = group;
    a.y = out == kc::gemm_out::f32 ? static_cast<void*>(dyf.get()) : static_cast<void*>(dyb.get());
    a.ldy = ldy;
    a.out = out;
    a.accumulate = acc;
    a.m = m;
    a.n = n;
    a.k = k;
    a.dependent = version == 2 || version == 7 || version == 9;  // a programmatic dependent launch: same results
    ASSERT_TRUE(kc::int4_gemv_supported(a));
    kc::int4_gemv(a, nullptr);

    const auto yf = dyf.download();
    const auto yb = from_bf16(dyb.download());
    std::vector<float> got;
    std::vector<double> ref;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double r = double(ref_y[std::size_t(i * n + j)]);
        if (acc) r += double(y0[std::size_t(i * ldy + j)]);
        ref.push_back(r);
        got.push_back(out == kc::gemm_out::f32 ? yf[std::size_t(i * ldy + j)] : yb[std::size_t(i * ldy + j)]);
      }
    const std::string what = "int4_gemv v" + std::to_string(version) + " m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" +
                             std::to_string(k) + " group=" + std::to_string(group) + (acc ? " acc" : "") +
                             (out == kc::gemm_out::f32 ? " f32" : " bf16");
    if (out == kc::gemm_out::f32) expect_close(got, ref, 2e-3, 1e-3, what, seed);
    else expect_close(got, ref, 2e-2, 1e-2, what, seed);
    EXPECT_TRUE(dyf.sentinel_intact() && dyb.sentinel_intact()) << what;
  }
}

TEST_F(cuda_int4_gemv, matches_the_cpu_reference_for_decode_batches) {
  unsigned seed = 400;
  for (const std::int64_t m : {1, 2, 3, 5, 8})
    for (const auto& [n, k] : {std::pair<std::int64_t, std::int64_t>{77, 256}, {512, 1408}, {33, 4096}}) {
      run_case(*dev_, m, n, k, 128, kc::gemm_out::bf16, false, ++seed);
      run_case(*dev_, m, n, k, 128, kc::gemm_out::f32, false, ++seed);
    }
}

TEST_F(cuda_int4_gemv, accumulates_into_f32_and_takes_small_groups) {
  run_case(*dev_, 1, 129, 512, 32, kc::gemm_out::f32, true, 501);
  run_case(*dev_, 4, 1000, 2048, 64, kc::gemm_out::f32, true, 502);
  run_case(*dev_, 8, 17, 96, 32, kc::gemm_out::bf16, false, 503);
}

TEST_F(cuda_int4_gemv, takes_any_k_and_group_that_are_multiples_of_32) {
  // v7's per-word scales: groups that are not powers of two, k not a
  // multiple of 128 (the last chunk's padding words), two chunks per group.
  run_case(*dev_, 3, 45, 480, 160, kc::gemm_out::f32, true, 504);
  run_case(*dev_, 2, 31, 384, 96, kc::gemm_out::bf16, false, 505);
  run_case(*dev_, 5, 40, 1024, 256, kc::gemm_out::f32, false, 506);
  run_case(*dev_, 1, 16, 32, 32, kc::gemm_out::bf16, false, 507);
  // Whole chunks, three per group (v2-v4 and v7's whole-chunk path).
  run_case(*dev_, 2, 48, 1536, 384, kc::gemm_out::f32, false, 508);
}

TEST_F(cuda_int4_gemv, llama_shapes_match) {
  // q_proj and down_proj of the 7B/8B shapes, one row of x.
  run_case(*dev_, 1, 4096, 4096, 128, kc::gemm_out::f32, false, 601);
  run_case(*dev_, 2, 4096, 14336, 128, kc::gemm_out::bf16, false, 602);
}

TEST_F(cuda_int4_gemv, tiled_runs_many_waves_and_rounds) {
  // v7 with more tiles than resident blocks (several waves), k past one
  // round of 32 chunks per warp, the words path (k not a multiple of 128)
  // past a round, and groups of several chunks.
  run_case(*dev_, 1, 12288, 4096, 128, kc::gemm_out::bf16, false, 711, {7});
  run_case(*dev_, 1, 4096, 11008, 128, kc::gemm_out::f32, true, 712, {7});
  run_case(*dev_, 2, 5000, 8288, 32, kc::gemm_out::f32, false, 713, {7});
  run_case(*dev_, 1, 4500, 4224, 256, kc::gemm_out::bf16, false, 714, {7});
}

TEST_F(cuda_int4_gemv, bulk_streams_many_tiles_and_pieces) {
  // v9's persistent grid: more tiles than blocks (several tiles per block,
  // the stage ring wrapping), tiles of several pieces (k = 14336: 112
  // chunks in pieces of 28; 11008: 86 in pieces of 43), an odd tile count.
  run_case(*dev_, 1, 12288, 4096, 128, kc::gemm_out::bf16, false, 701, {9});
  run_case(*dev_, 3, 9000, 4096, 128, kc::gemm_out::f32, true, 702, {9});
  run_case(*dev_, 1, 4096, 11008, 128, kc::gemm_out::bf16, false, 703, {9});
  run_case(*dev_, 8, 600, 14336, 128, kc::gemm_out::f32, false, 704, {9});
  // On Hopper these shapes take the bulk path (not v7's fallback).
  int device = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  if (major >= 9) {
    alignas(16) static std::uint16_t sz[8];
    kc::int4_gemv_args a;
    a.version = 9;
    a.scale_zero = sz;
    a.m = 1;
    a.n = 12288;
    a.k = 11008;
    EXPECT_TRUE(kc::detail::int4_gemv_bulk_fits(a));
    a.k = 4096;
    EXPECT_TRUE(kc::detail::int4_gemv_bulk_fits(a));
    a.group = 64;
    EXPECT_FALSE(kc::detail::int4_gemv_bulk_fits(a));
    a.group = 128;
    a.k = 53 * 128;  // a prime count of chunks past a piece: v7
    EXPECT_FALSE(kc::detail::int4_gemv_bulk_fits(a));
  }
}

// One row, 4 outputs, one chunk; every pointer at `dummy` (the calls below
// are refused before anything is read).
kc::int4_gemv_args small_args(std::uint8_t* dummy) {
  kc::int4_gemv_args a;
  a.m = 1;
  a.n = 4;
  a.k = 128;
  a.ldx = 128;
  a.ldy = 4;
  a.code_stride = 64;
  a.x = reinterpret_cast<const std::uint16_t*>(dummy);
  a.codes = dummy;
  a.y = dummy;
  return a;
}

// v7's SwiGLU epilogue: W = [gate; up] (n = 2 inter rows), y [m][inter]
// = bf16(silu(bf16(g)) * bf16(u)), against the CPU reference's products and
// against the unfused path on the GPU (v7 into bf16, then the SwiGLU
// kernel), which sums the same products in another order: they may differ
// by a bf16 rounding step of g or u, rarely.
void run_swiglu_case(allocator& dev, std::int64_t m, std::int64_t inter, std::int64_t k, std::int64_t group,
                     unsigned seed) {
  std::mt19937 rng(seed);
  const std::int64_t n = 2 * inter, ldx = k + 8, ldy = inter + 5;
  const reference_case c = make_reference_case(rng, m, n, k, group, ldx);
  const kcpu::int4_weights& q = c.q;
  const std::vector<float>& x = c.x;
  const std::vector<float>& gu = c.y;
  std::vector<double> ref;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < inter; ++j) {
      const double g = round_bf16(std::vector<float>{gu[std::size_t(i * n + j)]})[0];
      const double u = round_bf16(std::vector<float>{gu[std::size_t(i * n + inter + j)]})[0];
      ref.push_back(g / (1.0 + std::exp(-g)) * u);
    }

  const kcpu::int4_tiled_weights tq = kcpu::tile_int4(q.view());
  dev_array<std::uint16_t> dx(dev, to_bf16(x));
  dev_array<std::uint8_t> dcodes(dev, tq.codes);
  dev_array<std::uint16_t> dsz(dev, tq.scale_zero);
  dev_array<std::uint16_t> fused(dev, std::size_t(m * ldy)), plain_gu(dev, std::size_t(m * n)),
      plain(dev, std::size_t(m * ldy));
  kc::int4_gemv_args a;
  a.version = 7;
  a.x = dx.get();
  a.ldx = ldx;
  a.codes = dcodes.get();
  a.scale_zero = dsz.get();
  a.group = group;
  a.m = m;
  a.n = n;
  a.k = k;
  a.dependent = true;
  a.out = kc::gemm_out::swiglu;
  a.y = fused.get();
  a.ldy = ldy;
  kc::int4_gemv(a, nullptr);
  a.out = kc::gemm_out::bf16;
  a.y = plain_gu.get();
  a.ldy = n;
  kc::int4_gemv(a, nullptr);
  kc::swiglu(plain_gu.get(), n, plain.get(), ldy, m, inter, nullptr);

  const auto yf = from_bf16(fused.download()), yp = from_bf16(plain.download());
  std::vector<float> got, got_plain;
  std::vector<double> plain_ref;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < inter; ++j) {
      got.push_back(yf[std::size_t(i * ldy + j)]);
      plain_ref.push_back(yp[std::size_t(i * ldy + j)]);
    }
  const std::string what = "int4_gemv v7 SwiGLU m=" + std::to_string(m) + " inter=" + std::to_string(inter) +
                           " k=" + std::to_string(k) + " group=" + std::to_string(group);
  expect_close(got, ref, 3e-2, 2e-2, what + " against the CPU", seed);
  // A sum in another order flips a bf16 rounding of g or u now and then
  // (seen: 3 of 11008 outputs by more than 1%), so: the same tolerance as
  // against the CPU, and nearly every output bit for bit the same.
  expect_close(got, plain_ref, 3e-2, 2e-2, what + " against the unfused GPU path", seed);
  std::size_t same = 0;
  for (std::size_t i = 0; i < got.size(); ++i) same += got[i] == float(plain_ref[i]);
  EXPECT_GE(double(same), 0.97 * double(got.size())) << what << ": " << same << " of " << got.size()
                                                      << " outputs equal to the unfused path's";
  // Columns past inter in each row of y stay untouched (the poison).
  const auto raw = fused.download();
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = inter; j < ldy && i * ldy + j < std::int64_t(raw.size()); ++j)
      ASSERT_EQ(raw[std::size_t(i * ldy + j)], 0xffff) << what << ": wrote past inter in row " << i;
  EXPECT_TRUE(fused.sentinel_intact()) << what;
}

TEST_F(cuda_int4_gemv, swiglu_epilogue_matches_the_unfused_path) {
  run_swiglu_case(*dev_, 1, 11008, 4096, 128, 801);  // llama2-7b's MLP, the draft's shape
  run_swiglu_case(*dev_, 3, 176, 512, 128, 802);
  run_swiglu_case(*dev_, 8, 48, 480, 32, 803);     // the words path (k not a multiple of 128)
  run_swiglu_case(*dev_, 2, 1024, 1536, 384, 804);  // groups of three chunks
}

TEST_F(cuda_int4_gemv, swiglu_needs_the_tiled_layout_and_whole_tiles) {
  alignas(16) std::uint8_t dummy[64] = {};
  kc::int4_gemv_args a = small_args(dummy);
  const auto* h = reinterpret_cast<const std::uint16_t*>(dummy);
  a.out = kc::gemm_out::swiglu;
  a.n = 64;
  a.ldy = 32;
  a.version = 2;  // the row layout
  a.scale = a.zero = h;
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
  a.scale = a.zero = nullptr;
  a.scale_zero = h;
  a.version = 9;
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
  a.version = 7;
  a.n = 48;  // inter = 24: not whole tiles
  a.ldy = 24;
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
  a.n = 64;
  a.ldy = 31;  // shorter than inter
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
}

// f32 outputs compared as bits (the fused and unfused paths must agree exactly).
void expect_bytes_equal_f(const std::vector<float>& want, const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", the unfused path's " << want[i];
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements differ";
}

// v7 normalizing its own input (int4_gemv_args::norm): the same output bits
// as the RMSNorm kernel into bf16 followed by v7 on that, for f32 and bf16
// outputs, accumulated or not, the SwiGLU epilogue, rows shorter than a
// block's threads and rows of several chunks per thread.
void run_norm_case(allocator& dev, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t group,
                   kc::gemm_out out, bool acc, unsigned seed) {
  std::mt19937 rng(seed);
  const std::int64_t ldr = k + 4, ldy = out == kc::gemm_out::swiglu ? n / 2 : n + 3;
  const auto w = random_values(rng, std::size_t(n * k));
  const kcpu::int4_weights q = kcpu::quantize_int4(w.data(), dtype::f32, n, k, 0, group);
  const kcpu::int4_tiled_weights tq = kcpu::tile_int4(q.view());
  auto residual = random_values(rng, std::size_t(m * ldr), 6.f);
  auto weight = random_values(rng, std::size_t(k));
  for (auto& v : weight) v = 1.f + 0.25f * v;
  const auto y0 = random_values(rng, std::size_t(m * ldy));
  const float eps = 1e-5f;

  dev_array<float> dres(dev, residual), dw(dev, weight);
  dev_array<std::uint16_t> dxn(dev, std::size_t(m * k));
  dev_array<std::uint8_t> dcodes(dev, tq.codes);
  dev_array<std::uint16_t> dsz(dev, tq.scale_zero);
  dev_array<float> yf_plain(dev, y0), yf_fused(dev, y0);
  dev_array<std::uint16_t> yb_plain(dev, std::size_t(m * ldy)), yb_fused(dev, std::size_t(m * ldy));
  const bool f32 = out == kc::gemm_out::f32;
  kc::int4_gemv_args a;
  a.version = 7;
  a.codes = dcodes.get();
  a.scale_zero = dsz.get();
  a.group = group;
  a.m = m;
  a.n = n;
  a.k = k;
  a.out = out;
  a.accumulate = acc;
  a.ldy = ldy;
  a.dependent = true;
  // The unfused path: the RMSNorm kernel, then v7 on its bf16 rows.
  kc::rmsnorm(dres.get(), ldr, nullptr, 0, dw.get(), dxn.get(), k, m, k, eps, nullptr);
  a.x = dxn.get();
  a.ldx = k;
  a.y = f32 ? static_cast<void*>(yf_plain.get()) : static_cast<void*>(yb_plain.get());
  kc::int4_gemv(a, nullptr);
  // The fused one: x is not read (a null pointer would do; a wrong one shows it).
  a.x = dxn.get() + 8;
  a.norm.x = dres.get();
  a.norm.ld = ldr;
  a.norm.weight = dw.get();
  a.norm.eps = eps;
  a.y = f32 ? static_cast<void*>(yf_fused.get()) : static_cast<void*>(yb_fused.get());
  kc::int4_gemv(a, nullptr);
  const std::string what = "int4_gemv v7 norm m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" +
                           std::to_string(k) + " group=" + std::to_string(group) + (acc ? " acc" : "");
  if (f32) {
    const auto p = yf_plain.download(), f = yf_fused.download();
    expect_bytes_equal_f(p, f, what);
  } else {
    const auto p = yb_plain.download(), f = yb_fused.download();
    EXPECT_TRUE(p == f) << what << ": bf16 outputs differ from the unfused path";
    // And not vacuously: the outputs were written.
    EXPECT_NE(std::count(f.begin(), f.end(), std::uint16_t(0xffff)), std::ptrdiff_t(f.size())) << what;
  }
}

TEST_F(cuda_int4_gemv, normalizing_the_input_matches_the_rmsnorm_kernel_bit_for_bit) {
  run_norm_case(*dev_, 1, 4096, 4096, 128, kc::gemm_out::bf16, false, 811);     // llama2-7b's qkv input
  run_norm_case(*dev_, 1, 22016, 4096, 128, kc::gemm_out::swiglu, false, 812);  // its gate/up with the SwiGLU
  run_norm_case(*dev_, 3, 1000, 1024, 128, kc::gemm_out::f32, true, 813);
  run_norm_case(*dev_, 8, 64, 6144, 256, kc::gemm_out::bf16, false, 814);  // 6 chunks per thread, group of 2 chunks
  run_norm_case(*dev_, 2, 48, 128, 128, kc::gemm_out::f32, false, 815);    // a row shorter than the block
}

TEST_F(cuda_int4_gemv, normalizing_needs_v7_whole_chunks_and_aligned_rows) {
  alignas(16) std::uint8_t dummy[64] = {};
  alignas(16) static float rows[16];
  kc::int4_gemv_args a = small_args(dummy);
  const auto* h = reinterpret_cast<const std::uint16_t*>(dummy);
  a.norm.x = rows;
  a.norm.ld = 128;
  a.norm.weight = rows;
  a.version = 2;  // the row layout
  a.scale = a.zero = h;
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
  a.scale = a.zero = nullptr;
  a.scale_zero = h;
  a.version = 7;
  a.norm.ld = 100;  // shorter than k
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
  a.norm.ld = 128;
  a.norm.x = rows + 1;  // not 16-byte aligned
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
  a.norm.x = rows;
  a.k = 96;  // not whole chunks
  a.ldx = 96;
  a.group = 32;
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
  a.k = 8192 + 128;  // past the shared-memory rows
  a.ldx = a.norm.ld = a.k;
  a.group = 128;
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
}

TEST_F(cuda_int4_gemv, unknown_versions_are_refused) {
  alignas(16) std::uint8_t dummy[64] = {};
  kc::int4_gemv_args a = small_args(dummy);
  a.scale = a.zero = reinterpret_cast<const std::uint16_t*>(dummy);
  for (const int v : {0, 5, 6, 8, 10}) {
    a.version = v;
    EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument) << "version " << v;
  }
}

TEST_F(cuda_int4_gemv, unsupported_shapes_are_refused) {
  kc::int4_gemv_args a;
  a.m = 1;
  a.n = 4;
  a.k = 100;  // not a multiple of 32
  a.ldx = 104;
  a.ldy = 4;
  a.code_stride = 64;
  std::uint8_t dummy[64];
  a.codes = dummy;
  a.scale = reinterpret_cast<const std::uint16_t*>(dummy);
  a.zero = a.scale;
  a.y = dummy;
  EXPECT_FALSE(kc::int4_gemv_supported(a));
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
}

TEST_F(cuda_int4_gemv, layout_mismatches_are_refused) {
  alignas(16) std::uint8_t dummy[64] = {};
  kc::int4_gemv_args a = small_args(dummy);
  const auto* h = reinterpret_cast<const std::uint16_t*>(dummy);
  // v7 without the tiled scales, or with the row layout's.
  a.version = 7;
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
  a.scale = a.zero = h;
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
  a.scale_zero = h;
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
  // The row layout's versions with the tiled scales.
  a.version = 2;
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
  // v7 with an unaligned scale_zero, or k not a multiple of 32.
  a.version = 7;
  a.scale = a.zero = nullptr;
  a.scale_zero = h + 1;
  EXPECT_FALSE(kc::int4_gemv_supported(a));
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
  a.scale_zero = h;
  EXPECT_TRUE(kc::int4_gemv_supported(a));
  a.k = 100;
  a.ldx = 104;
  EXPECT_FALSE(kc::int4_gemv_supported(a));
  EXPECT_THROW(kc::int4_gemv(a, nullptr), std::invalid_argument);
  EXPECT_EQ(kc::int4_gemv_layout(7), kc::int4_layout::tiles);
  EXPECT_EQ(kc::int4_gemv_layout(9), kc::int4_layout::tiles);
  EXPECT_EQ(kc::int4_gemv_layout(2), kc::int4_layout::rows);
}
#else
TEST_F(cuda_int4_gemv, skipped_without_cuda) {}
#endif

}  // namespace
}  // namespace specpipe::test
