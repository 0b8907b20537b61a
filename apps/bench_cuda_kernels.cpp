// `specpipe bench --device cuda --kernels` (see bench_cuda_kernels.hpp).
// Device times come from CUDA events after warm-up; each figure is the median
// of the repeats, and the roofline is bytes / the copy bandwidth measured in
// the same run.
#ifdef SPECPIPE_HAVE_CUDA
#include "apps/bench_cuda_kernels.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/bench_cuda_timing.hpp"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/int4_gemv.hpp"
#include "kernels/cuda/int4_tiled.hpp"
#include "kernels/cuda/quant_bench.hpp"
#include "kernels/gather_bench.hpp"
#include "kernels/int4_linear.hpp"
#include "kernels/int4_tiled.hpp"
#include "memory/allocator.hpp"

namespace specpipe::apps {

namespace kc = kernels::cuda;

namespace {

using namespace cuda_bench;

// Random 4-bit codes of an n x k projection in the draft's format (g = 128;
// the values do not matter for the time, scales and zeros are finite), and
// the GEMV arguments over them for m rows of x [m][k] into y [m][n].
struct int4_codes {
  std::int64_t n, k, stride, groups;
  buffer codes, sz;  // sz: scales [n][groups], then zeros
  int4_codes(allocator& dev, std::int64_t n_, std::int64_t k_, kc::stream& st)
      : n(n_),
        k(k_),
        stride(kernels::cpu::int4_code_stride(k_)),
        groups((k_ + 127) / 128),
        codes(dev, std::size_t(n_ * stride)),
        sz(dev, std::size_t(2 * n_ * groups) * 2) {
    kc::fill_uniform_bf16(codes.as<std::uint16_t>(), n * stride / 2, -1, 1, 9, st.get());
    kc::fill_bytes(sz.data(), 0x3c, sz.size(), st.get());
  }
  double bytes() const { return double(kernels::cpu::int4_bytes(n, k, 128)); }
  kc::int4_gemv_args args(const buffer& x, const buffer& y, std::int64_t m, int version, kc::gemm_out out) const {
    kc::int4_gemv_args g;
    g.version = version;
    g.x = x.as<std::uint16_t>();
    g.ldx = k;
    g.codes = codes.as<std::uint8_t>();
    g.code_stride = stride;
    g.scale = sz.as<std::uint16_t>();
    g.zero = sz.as<std::uint16_t>() + n * groups;
    g.group = 128;
    g.y = y.data();
    g.ldy = n;
    g.out = out;
    g.m = m;
    g.n = n;
    g.k = k;
    return g;
  }
};

// The batch-1 GEMVs of one llama3-8b layer, as the decode step runs them,
// per GEMV variant (loads in flight x k-split): each projection alone, the
// gate/up projection with the SwiGLU epilogue against the plain one plus the
// SwiGLU kernel, and the layer's whole GEMV sequence back to back (qkv, o,
// gate/up with or without the epilogue, down). The sequences, x 32 layers,
// are the step-level difference between the variants.
void step_gemv_points(const bench_options& o, bench_report& r, allocator& dev, kc::stream& st) {
  const std::int64_t h = 4096, qkv_n = 6144, inter = 14336;
  buffer wqkv(dev, std::size_t(qkv_n * h) * 2), wo(dev, std::size_t(h * h) * 2),
      wgu(dev, std::size_t(2 * inter * h) * 2), wdown(dev, std::size_t(h * inter) * 2);
  // Two rows of activations: SpeCache's step projects its real and
  // speculative rows together (M = 2).
  buffer xn(dev, std::size_t(2 * h) * 2), qkv(dev, std::size_t(2 * qkv_n) * 2), attn(dev, std::size_t(2 * h) * 2),
      gu(dev, std::size_t(4 * inter) * 2), act(dev, std::size_t(2 * inter) * 2), x(dev, std::size_t(2 * h) * 4);
  unsigned seed = 20;
  for (buffer* b : {&wqkv, &wo, &wgu, &wdown})
    kc::fill_uniform_bf16(b->as<std::uint16_t>(), std::int64_t(b->size() / 2), -0.02f, 0.02f, ++seed, st.get());
  for (buffer* b : {&xn, &attn, &gu, &act})
    kc::fill_uniform_bf16(b->as<std::uint16_t>(), std::int64_t(b->size() / 2), -1, 1, ++seed, st.get());
  kc::fill_uniform_f32(x.as<float>(), 2 * h, -1, 1, ++seed, st.get());
  kc::blas_handle blas;
  auto args = [&](const buffer& in, std::int64_t ldx, const buffer& w, buffer& out, kc::gemm_out type, bool acc,
                  std::int64_t n, std::int64_t k, bool k_split, int unroll, std::int64_t m) {
    kc::gemm_args a;
    a.x = in.as<std::uint16_t>();
    a.ldx = ldx;
    a.w = w.as<std::uint16_t>();
    a.ldw = k;
    a.y = out.data();
    a.ldy = n;
    a.out = type;
    a.accumulate = acc;
    a.overlap_launch = o.overlap;
    a.k_split = k_split;
    a.unroll = unroll;
    a.m = m;
    a.n = n;
    a.k = k;
    return a;
  };
  const auto swiglu = [&](std::int64_t m) {
    kc::swiglu(gu.as<std::uint16_t>(), 2 * inter, act.as<std::uint16_t>(), inter, m, inter, st.get());
  };
  {
    const auto t = time_events(st.get(), o.warmup, o.repeats, [&] { swiglu(1); });
    const double bytes = double(3 * inter) * 2;
    r.points.push_back({"swiglu", 1, 0, false, "step SwiGLU kernel alone, 14336 columns", t.median, t.spread, 0,
                        bytes, bytes / r.copy_bandwidth * 1e3, used_gib()});
  }
  // Every variant at one row; with k-split at two.
  for (const std::int64_t m : {1, 2})
  for (const int unroll : {2, 4})
    for (const bool k_split : {true, false}) {
      if (m == 2 && !k_split) continue;
      const auto a_qkv = args(xn, h, wqkv, qkv, kc::gemm_out::bf16, false, qkv_n, h, k_split, unroll, m);
      const auto a_o = args(attn, h, wo, x, kc::gemm_out::f32, true, h, h, k_split, unroll, m);
      const auto a_gu = args(xn, h, wgu, gu, kc::gemm_out::bf16, false, 2 * inter, h, k_split, unroll, m);
      const auto a_down = args(act, inter, wdown, x, kc::gemm_out::f32, true, h, inter, k_split, unroll, m);
      auto a_fused = args(xn, h, wgu, act, kc::gemm_out::swiglu, false, 2 * inter, h, k_split, unroll, m);
      a_fused.ldy = inter;
      const std::string variant = "unroll " + std::to_string(unroll) + (k_split ? ", k-split" : ", no k-split") +
                                  (m == 2 ? ", 2 rows" : "");
      const struct {
        const char* name;
        const kc::gemm_args* a;
      } gemvs[] = {{"qkv 6144x4096", &a_qkv},
                   {"o 4096x4096 +acc", &a_o},
                   {"gate/up 28672x4096", &a_gu},
                   {"down 4096x14336 +acc", &a_down},
                   {"gate/up 28672x4096 with the SwiGLU epilogue", &a_fused}};
      for (const auto& g : gemvs) {
        const auto t = time_events(st.get(), o.warmup, o.repeats, [&] { kc::gemv(*g.a, st.get()); });
        const double wb = double(g.a->n * g.a->k) * 2;
        r.points.push_back({"gemv", int(m), 0, false,
                            std::string("step ") + g.name + ", " + variant + " (k-split " +
                                std::to_string(kc::gemv_planned_k_split(*g.a)) + ", " +
                                std::to_string(kc::gemv_resident_blocks(*g.a)) + " resident blocks)",
                            t.median, t.spread, 0, wb, wb / r.copy_bandwidth * 1e3, used_gib()});
      }
      const double layer_bytes = double(qkv_n * h + h * h + 2 * inter * h + h * inter) * 2;
      for (const bool fused : {false, true}) {
        const auto t = time_events(st.get(), o.warmup, o.repeats, [&] {
          kc::gemv(a_qkv, st.get());
          kc::gemv(a_o, st.get());
          if (fused) {
            kc::gemv(a_fused, st.get());
          } else {
            kc::gemv(a_gu, st.get());
            swiglu(m);
          }
          kc::gemv(a_down, st.get());
        });
        r.points.push_back({"layer", int(m), 0, false,
                            "step GEMVs of one layer (qkv, o, " +
                                std::string(fused ? "gate/up with the SwiGLU epilogue" : "gate/up + SwiGLU kernel") +
                                ", down), " + variant +
                                "; x32 = " + fixed(32 * t.median, 3) + " ms per step",
                            t.median, t.spread, 0, layer_bytes, layer_bytes / r.copy_bandwidth * 1e3, used_gib()});
      }
    }
}

void kernel_points(const bench_options& o, bench_report& r, const kc::device_properties& props) {
  auto dev = make_device_allocator(0);
  kc::stream st;
  // Decode attention alone: batch 8, 32 query / 8 KV heads, head_dim 128.
  const int batch = 8, nh = 32, nkv = 8, d = 128, max_splits = 128;
  const long long ctx = o.contexts.size() == 1 && o.contexts[0] != 4096 ? o.contexts[0] : 65536;
  const std::size_t cache_elems = std::size_t(batch) * nkv * std::size_t(ctx) * d;
  buffer k(*dev, cache_elems * 2), v(*dev, cache_elems * 2), q(*dev, std::size_t(batch) * nh * d * 2),
      out(*dev, std::size_t(batch) * nh * d * 2),
      part(*dev, kc::decode_attention_scratch_floats(batch, nh, d, max_splits) * 4), ints(*dev, 2 * batch * 4);
  kc::fill_uniform_bf16(k.as<std::uint16_t>(), std::int64_t(cache_elems), -1, 1, 1, st.get());
  kc::fill_uniform_bf16(v.as<std::uint16_t>(), std::int64_t(cache_elems), -1, 1, 2, st.get());
  kc::fill_uniform_bf16(q.as<std::uint16_t>(), batch * nh * d, -1, 1, 3, st.get());
  std::vector<std::int32_t> host(2 * batch);
  for (int b = 0; b < batch; ++b) {
    host[std::size_t(b)] = b;
    host[std::size_t(batch + b)] = std::int32_t(ctx);
  }
  kc::copy_to_device(ints.data(), host.data(), host.size() * 4, st.get());
  kc::decode_attention_args a;
  a.q = q.as<std::uint16_t>();
  a.ld_q = nh * d;
  a.k_cache = k.as<std::uint16_t>();
  a.v_cache = v.as<std::uint16_t>();
  a.capacity = ctx;
  a.slots = ints.as<std::int32_t>();
  a.lens = ints.as<std::int32_t>() + batch;
  a.out = out.as<std::uint16_t>();
  a.ld_out = nh * d;
  a.partial = part.as<float>();
  a.batch = batch;
  a.n_heads = nh;
  a.n_kv_heads = nkv;
  a.head_dim = d;
  a.scale = 1.f / std::sqrt(float(d));
  a.splits = kc::decode_attention_splits(batch, nkv, ctx, props.sm_count, max_splits);
  const double bytes = 2.0 * double(cache_elems) * 2;
  for (const int splits : {a.splits, 1}) {
    a.splits = splits;
    const auto t = time_events(st.get(), o.warmup, o.repeats, [&] { kc::decode_attention(a, st.get()); });
    bench_point p{"attention", batch, ctx, false,
                  "32/8 heads d=128, splits=" + std::to_string(splits) + ", " +
                      std::to_string(bytes / (t.median * 1e-3) / 1e12).substr(0, 5) + " TB/s",
                  t.median, t.spread, batch / (t.median * 1e-3), bytes, bytes / r.copy_bandwidth * 1e3, used_gib()};
    r.points.push_back(p);
  }
  step_gemv_points(o, r, *dev, st);
  // Decode GEMV (the defaults of gemm_args) vs cuBLAS on llama3-8b
  // projection shapes.
  const std::int64_t shapes[][2] = {{6144, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}};
  for (const auto& s : shapes) {
    const std::int64_t n = s[0], kk = s[1];
    buffer w(*dev, std::size_t(n * kk) * 2), x(*dev, std::size_t(8 * kk) * 2), y(*dev, std::size_t(8 * n) * 4);
    kc::fill_uniform_bf16(w.as<std::uint16_t>(), n * kk, -0.02f, 0.02f, 7, st.get());
    kc::fill_uniform_bf16(x.as<std::uint16_t>(), 8 * kk, -1, 1, 8, st.get());
    kc::blas_handle blas;
    for (const std::int64_t m : {1, 2, 4, 8})
      for (const auto impl : {kc::gemm_impl::gemv, kc::gemm_impl::cublas}) {
        kc::gemm_args g;
        g.x = x.as<std::uint16_t>();
        g.ldx = kk;
        g.w = w.as<std::uint16_t>();
        g.ldw = kk;
        g.y = y.data();
        g.ldy = n;
        g.out = kc::gemm_out::bf16;
        g.m = m;
        g.n = n;
        g.k = kk;
        const auto t = time_events(st.get(), o.warmup, o.repeats, [&] { kc::gemm(blas.get(), g, st.get(), impl); });
        const double wb = double(n * kk) * 2;
        r.points.push_back({"gemv", m, 0, false,
                            std::string(impl == kc::gemm_impl::gemv ? "gemv " : "cublas ") + std::to_string(n) +
                                "x" + std::to_string(kk),
                            t.median, t.spread, 0, wb, wb / r.copy_bandwidth * 1e3, used_gib()});
      }
    // QuantSpec's draft: the same shape as 4-bit codes.
    const int4_codes q(*dev, n, kk, st);
    const double qb = q.bytes();
    for (const int version : {1, 2})
    for (const std::int64_t m : {1, 2, 4, 8}) {
      const kc::int4_gemv_args g = q.args(x, y, m, version, kc::gemm_out::bf16);
      const auto t = time_events(st.get(), o.warmup, o.repeats, [&] { kc::int4_gemv(g, st.get()); });
      r.points.push_back({"gemv", m, 0, false,
                          std::string(version == 1 ? "int4 gemv v1 (CUDA cores) " : "int4 gemv v2 (tensor cores) ") +
                              std::to_string(n) + "x" + std::to_string(kk) + " g128",
                          t.median, t.spread, 0, qb, qb / r.copy_bandwidth * 1e3, used_gib()});
    }
  }
}

// The draft's 4-bit GEMV, every version, on the projection shapes of
// llama2-7b and llama3-8b (g = 128; the values do not matter for the time),
// against the bytes it must read.
void int4_gemv_points(const bench_options& o, bench_report& r) {
  auto dev = make_device_allocator(0);
  kc::stream st;
  const std::int64_t shapes[][2] = {{12288, 4096}, {4096, 4096}, {22016, 4096}, {4096, 11008},
                                    {6144, 4096},  {28672, 4096}, {4096, 14336}};
  for (const auto& sh : shapes) {
    const std::int64_t n = sh[0], kk = sh[1];
    const int4_codes q(*dev, n, kk, st);
    buffer x(*dev, std::size_t(8 * kk) * 2), y(*dev, std::size_t(8 * n) * 4);
    kc::fill_uniform_bf16(x.as<std::uint16_t>(), 8 * kk, -1, 1, 8, st.get());
    const double qb = q.bytes();
    // Versions 7 and 9 read the same weights repacked in 16-row tiles, once, here.
    buffer tiled(*dev, std::size_t(kernels::cpu::int4_tiled_code_bytes(n, kk))),
        tiled_sz(*dev, std::size_t(kernels::cpu::int4_tiled_scale_zero_size(n, kk, 128)) * 2);
    {
      kc::int4_tile_args t;
      t.codes = q.codes.as<std::uint8_t>();
      t.code_stride = q.stride;
      t.scale = q.sz.as<std::uint16_t>();
      t.zero = q.sz.as<std::uint16_t>() + n * q.groups;
      t.out = n;
      t.in = kk;
      t.group = 128;
      t.tiled_codes = tiled.as<std::uint8_t>();
      t.tiled_scale_zero = tiled_sz.as<std::uint16_t>();
      kc::int4_tile(t, st.get());
    }
    for (const int version : {1, 2, 3, 4, 7, 9})
      for (const std::int64_t m : {1, 4}) {
        kc::int4_gemv_args g = q.args(x, y, m, version, kc::gemm_out::f32);
        if (kc::int4_gemv_layout(g.version) == kc::int4_layout::tiles) {
          g.codes = tiled.as<std::uint8_t>();
          g.scale_zero = tiled_sz.as<std::uint16_t>();
          g.scale = g.zero = nullptr;
        }
        const auto t = time_events(st.get(), o.warmup, o.repeats, [&] { kc::int4_gemv(g, st.get()); });
        r.points.push_back({"gemv", m, 0, false,
                            "int4 gemv v" + std::to_string(version) + " " + std::to_string(n) + "x" + std::to_string(kk) + " g128, " +
                                fixed(qb / (t.median * 1e-3) / 1e12, 2) + " TB/s",
                            t.median, t.spread, 0, qb, qb / r.copy_bandwidth * 1e3, used_gib()});
      }
  }
}

// The draft's four 4-bit GEMVs of a llama2-7b layer (qkv, o, gate/up, down;
// tiled, g = 128, one row of x) over 12 layers of distinct weights (1.3 GB,
// far past L2, so every layer's codes come from DRAM as in a decode step),
// launched back to back as programmatic dependents as the step launches them:
// the GEMVs' share of a draft step without the attention and the small
// kernels between them. Twice: gate/up with the SwiGLU as its epilogue, and
// plain gate/up followed by the SwiGLU kernel.
void int4_layer_points(const bench_options& o, bench_report& r) {
  auto dev = make_device_allocator(0);
  kc::stream st;
  constexpr int layers = 12;
  const std::int64_t h = 4096, inter = 11008;
  const std::int64_t shapes[4][2] = {{3 * h, h}, {h, h}, {2 * inter, h}, {h, inter}};
  struct tiled_weight {
    buffer codes, sz;
    std::int64_t n, k;
  };
  std::vector<tiled_weight> w;
  double bytes = 0;
  for (int l = 0; l < layers; ++l)
    for (const auto& sh : shapes) {
      const std::int64_t n = sh[0], kk = sh[1];
      tiled_weight t{buffer(*dev, std::size_t(kernels::cpu::int4_tiled_code_bytes(n, kk))),
                     buffer(*dev, std::size_t(kernels::cpu::int4_tiled_scale_zero_size(n, kk, 128)) * 2), n, kk};
      kc::fill_uniform_bf16(t.codes.as<std::uint16_t>(), std::int64_t(t.codes.size() / 2), -1, 1, 11 + l, st.get());
      kc::fill_bytes(t.sz.data(), 0x3c, t.sz.size(), st.get());
      bytes += double(t.codes.size() + t.sz.size());
      w.push_back(std::move(t));
    }
  buffer x(*dev, std::size_t(inter) * 2), y(*dev, std::size_t(2 * inter) * 4), act(*dev, std::size_t(inter) * 2);
  kc::fill_uniform_bf16(x.as<std::uint16_t>(), inter, -1, 1, 8, st.get());
  for (const bool fused : {true, false}) {
    const auto pass = [&] {
      for (std::size_t i = 0; i < w.size(); ++i) {
        const auto& t = w[i];
        const bool gate_up = i % 4 == 2;
        kc::int4_gemv_args g;
        g.version = 7;
        g.x = x.as<std::uint16_t>();
        g.ldx = t.k;
        g.codes = t.codes.as<std::uint8_t>();
        g.scale_zero = t.sz.as<std::uint16_t>();
        g.group = 128;
        g.y = gate_up && fused ? act.data() : y.data();
        g.ldy = gate_up && fused ? inter : t.n;
        g.out = !gate_up ? kc::gemm_out::f32 : fused ? kc::gemm_out::swiglu : kc::gemm_out::bf16;
        g.m = 1;
        g.n = t.n;
        g.k = t.k;
        g.dependent = true;
        kc::int4_gemv(g, st.get());
        if (gate_up && !fused)
          kc::swiglu(y.as<std::uint16_t>(), 2 * inter, act.as<std::uint16_t>(), inter, 1, inter, st.get(), true);
      }
    };
    const auto t = time_events(st.get(), o.warmup, o.repeats, pass);
    r.points.push_back({"gemv", 1, 0, false,
                        std::string("int4 gemv v7 llama2-7b layer sequence") +
                            (fused ? " (SwiGLU epilogue)" : " (SwiGLU kernel)") + " x " + std::to_string(layers) +
                            " layers, cold, " + fixed(t.median * 1e3 / layers, 1) + " us a layer, " +
                            fixed(bytes / (t.median * 1e-3) / 1e12, 2) + " TB/s",
                        t.median, t.spread, 0, bytes, bytes / r.copy_bandwidth * 1e3, used_gib()});
  }
}

// Decode attention over each quantized KV format against the bf16 kernel on
// the same shape (64k context, batch 8, 32/8 heads, d=128), in the same run:
// v1 and v2 per format, then v2's variants, SpeCache's mixed rows, the
// scores and top-k, and quantize-on-append (kind "qattn"; notes name the
// kernel first, so scripts can grep them).
void quant_points(const bench_options& o, bench_report& r) {
  kc::quant_bench_options qo;
  qo.bandwidth = r.copy_bandwidth;
  qo.repeats = o.repeats;
  qo.warmup = o.warmup;
  for (const auto& q : kc::run_quant_attention_bench(qo)) {
    bench_point p;
    p.kind = "qattn";
    p.batch = q.batch;
    p.context = qo.context;
    p.ms = q.ms;
    p.ms_spread = q.spread_ms;
    p.bytes = q.bytes;
    p.roofline_ms = q.bytes > 0 ? q.roofline_ms : 0;
    char note[256];
    if (q.kernel == "quantize" || q.kernel == "quantize-idle")
      std::snprintf(note, sizeof note, "%s %s %d-bit, %s", q.kernel.c_str(), q.format.c_str(), q.bits,
                    q.note.c_str());
    else
      std::snprintf(note, sizeof note, "%s %s %d-bit, splits=%d%s%s, %.0f GB/s, %.2fx vs bf16", q.kernel.c_str(),
                    q.format.c_str(), q.bits, q.splits, q.note.empty() ? "" : ", ", q.note.c_str(), q.gb_per_s,
                    q.speedup_vs_bf16);
    p.note = note;
    r.points.push_back(p);
  }
}

// Sparse gathers of 256-byte rows (one token's K or V of one head, d=128,
// f16) from a 4 GiB mapped pinned store: every GPU path, row pattern and
// arena page size, each against a dense pinned copy of its own arena measured
// in the same run (kernels/gather_bench.hpp).
void gather_points(bench_report& r) {
  kernels::gather_bench_options go;
  go.cpu = false;
  const auto res = kernels::run_gather_bench(go);
  for (const auto& n : res.notes) r.notes.push_back("gather: " + n);
  for (const auto& g : res.results) {
    double dense_gbs = 0;
    for (const auto& d : res.results)
      if (d.backend == "dense-pinned-copy" && d.arena == g.arena) dense_gbs = d.gb_per_s;
    bench_point p;
    p.kind = "gather";
    p.batch = g.rows;
    p.ms = g.seconds * 1e3;
    p.bytes = double(g.rows) * double(g.row_bytes);
    p.roofline_ms = dense_gbs > 0 ? p.bytes / (dense_gbs * 1e9) * 1e3 : 0;
    p.skipped = g.seconds <= 0;
    char text[256];
    if (g.backend == "dense-pinned-copy")
      std::snprintf(text, sizeof text, "%s arena %s, %zu-byte rows, %.1f GB/s", g.backend.c_str(), g.arena.c_str(),
                    g.row_bytes, g.gb_per_s);
    else
      std::snprintf(text, sizeof text,
                    "%s %s arena %s, %zu-byte rows, %.1f GB/s (LLC-warm %.1f), single %.1f us, %.0f runs",
                    g.backend.c_str(), g.pattern.c_str(), g.arena.c_str(), g.row_bytes, g.gb_per_s,
                    g.warm_seconds > 0 ? double(g.rows * std::int64_t(g.row_bytes)) / g.warm_seconds / 1e9 : 0.0,
                    g.single_seconds * 1e6, g.runs);
    p.note = std::string(text) + (g.matches_reference ? "" : ", OUTPUT MISMATCH") + (g.note.empty() ? "" : ", " + g.note);
    p.extra = {{"gb_per_s", g.gb_per_s},
               {"warm_gb_per_s", g.warm_seconds > 0 ? double(g.rows) * double(g.row_bytes) / g.warm_seconds / 1e9 : 0},
               {"single_us", g.single_seconds * 1e6},
               {"runs", g.runs}};
    r.points.push_back(p);
  }
}

}  // namespace

void cuda_kernel_points(const bench_options& o, bench_report& r, const kc::device_properties& props) {
  if (o.gather_only) {
    gather_points(r);
    return;
  }
  if (o.gemv_only) {
    {
      auto dev = make_device_allocator(0);
      kc::stream st;
      step_gemv_points(o, r, *dev, st);
    }
    int4_gemv_points(o, r);
    int4_layer_points(o, r);
    return;
  }
  if (o.attention_only) {
    quant_points(o, r);
    return;
  }
  kernel_points(o, r, props);
  quant_points(o, r);
  gather_points(r);
}

}  // namespace specpipe::apps
#endif
