// The CUDA measurements of `specpipe bench` (see bench.hpp). Device times come
// from CUDA events after warm-up; each figure is the median of the repeats,
// and the roofline is bytes / the copy bandwidth measured in the same run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "apps/bench.hpp"
#include "apps/cli_support.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include <random>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/quant_bench.hpp"
#include "kernels/gather_bench.hpp"
#include "apps/bench_cuda_timing.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/int4_gemv.hpp"
#include "kernels/cuda/int4_tiled.hpp"
#include "kernels/int4_linear.hpp"
#include "kernels/int4_tiled.hpp"
#include "memory/allocator.hpp"
#include "memory/kv_layout.hpp"
#include "model/cuda_forward.hpp"
#include "model/model.hpp"
#endif

namespace specpipe::apps {

#ifndef SPECPIPE_HAVE_CUDA

bench_report run_cuda_bench(const bench_options&) {
  throw usage_error("--device cuda: this build has no CUDA backend (configure with -DSPECPIPE_CUDA=ON)");
}

#else

namespace kc = kernels::cuda;

namespace {

using namespace cuda_bench;

// The GEMV v2 switches given on the command line, over cuda_forward's defaults.
void apply_gemv_flags(const bench_options& o, cuda_forward_options& fo) {
  fo.overlap_launch = o.overlap;
  if (o.fuse_swiglu) fo.fuse_swiglu = *o.fuse_swiglu;
  if (o.k_split) fo.gemv_k_split = *o.k_split;
  if (o.gemv_unroll) fo.gemv_unroll = *o.gemv_unroll;
}

std::string gemv_variant(const cuda_forward_options& fo) {
  return std::string(fo.overlap_launch ? "PDL GEMVs" : "no PDL") +
         (fo.fuse_swiglu ? ", SwiGLU in the gate/up GEMV" : ", SwiGLU kernel") +
         (fo.gemv_k_split ? ", k-split" : ", no k-split") + ", unroll " + std::to_string(fo.gemv_unroll);
}

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

// One eager SpeCache step with its timeline (events around every layer's
// compute, top-k and fetch): where the time of a speculative step goes, as
// "; one eager step: ..." for the bench line. The fetch's share inside the
// layers' spans is what really overlapped, and its total against the
// "alone" figure says whether it ran slower beside the compute.
std::string timeline_summary(cuda_forward& fwd, std::span<const int> slots, std::span<const std::int32_t> toks,
                             std::span<const std::int32_t> spec_toks) {
  fwd.specache_set_timeline(true);
  fwd.specache_step(slots, toks, spec_toks);
  const auto spans = fwd.specache_timeline();
  fwd.specache_set_timeline(false);
  double layers = 0, topk = 0, fetch = 0, fetch_inside = 0, last_layer = 0, last_fetch = 0;
  for (const auto& sp : spans) {
    const double d = sp.end_ms - sp.start_ms;
    const std::string_view name = sp.name;
    if (name == "layer") {
      layers += d;
      last_layer = std::max(last_layer, sp.end_ms);
    } else if (name == "top-k") {
      topk += d;
    } else if (name == "fetch") {
      fetch += d;
      last_fetch = std::max(last_fetch, sp.end_ms);
      for (const auto& ly : spans)
        if (std::string_view(ly.name) == "layer")
          fetch_inside += std::max(0.0, std::min(sp.end_ms, ly.end_ms) - std::max(sp.start_ms, ly.start_ms));
    }
  }
  return "; one eager step: layers " + fixed(layers, 3) + " ms, top-k " + fixed(topk, 3) + " ms, fetch " +
         fixed(fetch, 3) + " ms (" + fixed(fetch > 0 ? 100 * fetch_inside / fetch : 0, 0) +
         "% of it beside a layer), the last fetch ends " + fixed(last_fetch - last_layer, 3) +
         " ms after the last layer";
}

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
  buffer xn(dev, std::size_t(h) * 2), qkv(dev, std::size_t(qkv_n) * 2), attn(dev, std::size_t(h) * 2),
      gu(dev, std::size_t(2 * inter) * 2), act(dev, std::size_t(inter) * 2), x(dev, std::size_t(h) * 4);
  unsigned seed = 20;
  for (buffer* b : {&wqkv, &wo, &wgu, &wdown})
    kc::fill_uniform_bf16(b->as<std::uint16_t>(), std::int64_t(b->size() / 2), -0.02f, 0.02f, ++seed, st.get());
  for (buffer* b : {&xn, &attn, &gu, &act})
    kc::fill_uniform_bf16(b->as<std::uint16_t>(), std::int64_t(b->size() / 2), -1, 1, ++seed, st.get());
  kc::fill_uniform_f32(x.as<float>(), h, -1, 1, ++seed, st.get());
  kc::blas_handle blas;
  auto args = [&](const buffer& in, std::int64_t ldx, const buffer& w, buffer& out, kc::gemm_out type, bool acc,
                  std::int64_t n, std::int64_t k, bool k_split, int unroll) {
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
    a.m = 1;
    a.n = n;
    a.k = k;
    return a;
  };
  const auto swiglu = [&] {
    kc::swiglu(gu.as<std::uint16_t>(), 2 * inter, act.as<std::uint16_t>(), inter, 1, inter, st.get());
  };
  {
    const auto t = time_events(st.get(), o.warmup, o.repeats, swiglu);
    const double bytes = double(3 * inter) * 2;
    r.points.push_back({"swiglu", 1, 0, false, "step SwiGLU kernel alone, 14336 columns", t.median, t.spread, 0,
                        bytes, bytes / r.copy_bandwidth * 1e3, used_gib()});
  }
  for (const int unroll : {2, 4})
    for (const bool k_split : {true, false}) {
      const auto a_qkv = args(xn, h, wqkv, qkv, kc::gemm_out::bf16, false, qkv_n, h, k_split, unroll);
      const auto a_o = args(attn, h, wo, x, kc::gemm_out::f32, true, h, h, k_split, unroll);
      const auto a_gu = args(xn, h, wgu, gu, kc::gemm_out::bf16, false, 2 * inter, h, k_split, unroll);
      const auto a_down = args(act, inter, wdown, x, kc::gemm_out::f32, true, h, inter, k_split, unroll);
      auto a_fused = args(xn, h, wgu, act, kc::gemm_out::swiglu, false, 2 * inter, h, k_split, unroll);
      a_fused.ldy = inter;
      const std::string variant = "unroll " + std::to_string(unroll) + (k_split ? ", k-split" : ", no k-split");
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
        r.points.push_back({"gemv", 1, 0, false,
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
            swiglu();
          }
          kc::gemv(a_down, st.get());
        });
        r.points.push_back({"layer", 1, 0, false,
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
    // Version 7 reads the same weights repacked in 16-row tiles, once, here.
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
    for (const int version : {1, 2, 3, 4, 7})
      for (const std::int64_t m : {1, 4}) {
        kc::int4_gemv_args g = q.args(x, y, m, version, kc::gemm_out::f32);
        if (version == 7) {
          g.codes = tiled.as<std::uint8_t>();
          g.scale_zero = tiled_sz.as<std::uint16_t>();
          g.scale = g.zero = nullptr;
        }
        const auto t = time_events(st.get(), o.warmup, o.repeats, [&] { kc::int4_gemv(g, st.get()); });
        r.points.push_back({"gemv", m, 0, false,
                            "int4 gemv v" + std::to_string(version) + " " + std::to_string(n) + "x" +
                                std::to_string(kk) + " g128, " + fixed(qb / (t.median * 1e-3) / 1e12, 2) + " TB/s",
                            t.median, t.spread, 0, qb, qb / r.copy_bandwidth * 1e3, used_gib()});
      }
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

bench_report run_cuda_bench(const bench_options& o) {
  bench_report r;
  kc::set_device(0);
  const auto props = kc::query_device(0);
  r.device_name = props.name + " (" + std::to_string(props.sm_count) + " SMs, " +
                  std::to_string(props.total_memory >> 30) + " GiB)";
  r.copy_bandwidth = kc::measure_copy_bandwidth(std::size_t(2) << 30, 20);
  if (o.kernels && o.gather_only) {
    gather_points(r);
    return r;
  }
  if (o.kernels && o.gemv_only) {
    int4_gemv_points(o, r);
    return r;
  }
  if (o.kernels) {
    kernel_points(o, r, props);
    quant_points(o, r);
    gather_points(r);
    return r;
  }
  const auto& c = o.config;
  std::optional<model> host;
  std::optional<cuda_model> gpu;
  if (!o.model_dir.empty()) {
    host.emplace(model::load(o.model_dir));
    gpu.emplace(host->config, host->weights, 0);
    r.notes.push_back("weights loaded from " + o.model_dir);
  } else {
    gpu.emplace(cuda_model::random(c, 42));
    r.notes.push_back("random weights generated on the GPU (shapes of preset " + o.model_name + ")");
  }
  r.notes.push_back("decode: the KV cache is filled with random values for the context instead of a prefill; "
                    "each step then appends one token per sequence");
  const double wbytes = double(cuda_model::weight_bytes(c));
  const double kv_tok = double(cuda_forward::kv_bytes_per_token(c));
  std::mt19937 rng(3);
  auto tokens = [&](std::size_t n) {
    std::vector<std::int32_t> t(n);
    for (auto& x : t) x = std::int32_t(rng() % std::uint32_t(c.vocab_size));
    return t;
  };

  // Prefill with the tensor-core (cuBLAS) attention, then with the CUDA-core
  // flash kernel of v1 as the baseline of the same run.
  for (const bool tensor_cores : {true, false}) {
    if (o.prefill_tokens <= 0) break;
    cuda_forward_options fo;
    fo.max_batch = 1;
    fo.max_context = o.prefill_tokens;
    fo.use_graphs = o.graphs;
    apply_gemv_flags(o, fo);
    fo.prefill_attention_cublas = tensor_cores;
    const std::string how = tensor_cores ? "cuBLAS attention" : "flash attention (CUDA cores)";
    if (cuda_forward::device_bytes(c, fo) > kc::query_memory().free) {
      r.points.push_back({"prefill", 1, o.prefill_tokens, true, how + ": does not fit in free GPU memory"});
    } else {
      cuda_forward fwd(*gpu, fo);
      const auto prompt = tokens(std::size_t(o.prefill_tokens));
      const int reps = std::max(1, std::min(o.repeats, 5));
      const auto t = time_events(fwd.stream(), std::min(o.warmup, 1), reps, [&] {
        fwd.truncate(0, 0);
        fwd.prefill(0, prompt);
      });
      r.points.push_back({"prefill", 1, o.prefill_tokens, false,
                          "chunks of " + std::to_string(fo.prefill_chunk) + ", " + how, t.median, t.spread,
                          double(o.prefill_tokens) / (t.median * 1e-3), wbytes, 0, used_gib()});
    }
  }

  const std::vector<kv_mode> modes = o.kv_modes.empty() ? std::vector<kv_mode>{kv_mode{}} : o.kv_modes;
  // --gpu-memory: what the weights leave of the budget for each forward.
  const double budget = o.gpu_memory_gib > 0 ? o.gpu_memory_gib * gib : double(props.total_memory);
  if (o.gpu_memory_gib > 0)
    r.notes.push_back("GPU memory budget " + fixed(o.gpu_memory_gib, 1) + " GiB: weights " + fixed(wbytes / gib, 2) +
                      " GiB + each configuration's caches and scratch must fit");
  auto options_for = [&](long long ctx, long long b, const kv_mode& mode) {
    cuda_forward_options fo;
    fo.max_batch = int(b);
    // Room for the timed steps (specache times up to three loops).
    fo.max_context = ctx + 3 * (o.warmup + o.repeats) + 2;
    fo.prefill_chunk = 16;  // decode-only: keep the prefill scratch small
    fo.prefill_attention_cublas = false;
    fo.use_graphs = o.graphs;
    fo.kv = mode;
    fo.kv_staging_tokens = 0;  // decode-only: no prefill staging area
    fo.packed_stages = o.packed_stages;
    fo.packed_lane_order = o.packed_lane_order;
    if (mode.speculative()) {
      // SpeCache: the host store, as long as --host-memory allows (positions
      // alias modulo a shorter store beyond that: the same rows' bytes move).
      fo.specache_fetch = true;
      using choice = cuda_forward_options::specache_block_choice;
      fo.specache_blocks = o.specache_blocks == "shared"    ? choice::shared
                           : o.specache_blocks == "per-row" ? choice::per_row
                                                            : choice::automatic;
      const double per_token = double(cuda_forward::specache_host_bytes(c, fo)) / double(fo.max_context);
      fo.specache_store_tokens =
          std::max<std::int64_t>(1, std::min<std::int64_t>(fo.max_context, std::int64_t(o.host_memory_gib * gib / per_token)));
    }
    apply_gemv_flags(o, fo);
    return fo;
  };
  auto fits_budget = [&](const cuda_forward_options& fo) {
    return wbytes + double(cuda_forward::device_bytes(c, fo)) <= budget;
  };
  // The largest batch whose caches fit the budget (0: not even one sequence).
  auto largest_batch = [&](long long ctx, const kv_mode& mode) -> long long {
    long long lo = 0, hi = 4096;
    while (lo < hi) {
      const long long mid = (lo + hi + 1) / 2;
      if (fits_budget(options_for(ctx, mid, mode))) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  for (const long long ctx : o.contexts) {
    std::vector<std::pair<long long, kv_mode>> runs;
    if (o.max_batch) {
      for (const kv_mode& mode : modes) {
        long long b = 0;
        try {
          b = largest_batch(ctx, mode);
        } catch (const std::invalid_argument& e) {
          r.points.push_back({"decode", 0, ctx, true, mode.describe() + ": " + e.what()});
          continue;
        }
        if (b == 0) {
          r.points.push_back({"decode", 0, ctx, true,
                              (mode.format == kv_format::full ? std::string("full (bf16)") : mode.describe()) +
                                  ": not one sequence fits the budget"});
          continue;
        }
        runs.emplace_back(b, mode);
      }
    } else {
      for (const long long b : o.batches)
        for (const kv_mode& mode : modes) runs.emplace_back(b, mode);
    }
    std::vector<std::pair<std::string, double>> at_max;  // mode, tokens/s at its max batch
    for (const auto& [b, mode] : runs) {
        const bool full = mode.format == kv_format::full;
        const std::string label = full ? std::string("full (bf16)") : mode.describe();
        cuda_forward_options fo = options_for(ctx, b, mode);
        std::size_t need = 0;
        try {
          need = cuda_forward::device_bytes(c, fo);
        } catch (const std::invalid_argument& e) {
          r.points.push_back({"decode", b, ctx, true, label + ": " + e.what()});
          continue;
        }
        if (o.gpu_memory_gib > 0 && !fits_budget(fo)) {
          r.points.push_back({"decode", b, ctx, true,
                              label + ": weights + " + fixed(double(need) / gib, 2) + " GiB exceed --gpu-memory " +
                                  fixed(o.gpu_memory_gib, 1)});
          continue;
        }
        const std::size_t free = kc::query_memory().free;
        if (need + (std::size_t(512) << 20) > free) {
          r.points.push_back({"decode", b, ctx, true,
                              label + ": needs " + std::to_string(double(need) / gib).substr(0, 6) + " GiB, " +
                                  std::to_string(double(free) / gib).substr(0, 6) + " GiB free"});
          continue;
        }
        cuda_forward fwd(*gpu, fo);
        std::vector<int> slots(static_cast<std::size_t>(b));
        for (int i = 0; i < int(b); ++i) {
          slots[std::size_t(i)] = i;
          fwd.fill_random_kv(i, ctx, 100 + std::uint64_t(i));
        }
        const auto toks = tokens(std::size_t(b));
        const auto spec_toks = tokens(std::size_t(b));
        const bool spec = mode.speculative(), output = spec && mode.prefetch == specache_prefetch::output;
        if (spec && !output) fwd.specache_predecode(slots, toks);  // seeds the first rows
        const std::int64_t fetched_before = fwd.specache_rows_fetched();
        const auto t = time_events(fwd.stream(), o.warmup, o.repeats, [&] {
          if (output) fwd.specache_output_step(slots, toks);
          else if (spec) fwd.specache_step(slots, toks, spec_toks);
          else fwd.decode(slots, toks);
        });
        // Per step: every weight once, and each sequence's K/V: ctx bf16 rows
        // per layer, or its packed tokens at the mode's bytes per token plus
        // the bf16 window (the steps add warmup + repeats tokens at most).
        double kv_read = double(ctx) * kv_tok;
        if (!full) {
          const std::int64_t q = quantized_tokens(ctx, mode.group, mode.flush_at());
          kv_read = double(q) * cuda_forward::kv_read_bytes_per_token(c, mode) + double(ctx - q) * kv_tok;
        }
        const double bytes = wbytes + double(b) * kv_read;
        const double kv_gib = double(cuda_forward::kv_device_bytes(c, fo)) / gib;
        char mem[160];
        std::snprintf(mem, sizeof mem, "KV on device %.2f GiB (%.1f B/token, %.4fx bf16)", kv_gib,
                      cuda_forward::kv_bytes_per_token(c, mode), cuda_forward::kv_bytes_per_token(c, mode) / kv_tok);
        std::string how = label + ", " + mem + ", " + (o.graphs ? "CUDA graph, " : "eager launches, ") +
                          gemv_variant(fo);
        if (full) {
          // The attention split count the step was captured with (v2 takes the
          // blocks per SM from the occupancy; v1 assumed 2).
          const int bps = kc::decode_attention_blocks_per_sm(int(c.num_attention_heads),
                                                             int(c.num_key_value_heads), int(c.head_dim));
          const int splits = kc::decode_attention_splits(int(b), int(c.num_key_value_heads), fo.max_context,
                                                         props.sm_count, fo.max_splits, bps);
          how += ", attention splits " + std::to_string(splits) + " (" + std::to_string(bps) + " blocks/SM)";
        } else {
          how += std::string(", packed attention ") +
                 (fwd.packed_lane_order() ? "v4 (lane order" : "v3 (cpu order, lean smem, combine 1") +
                 ", >= 16 tiles/split), " +
                 (fo.packed_stages > 0 ? std::to_string(fo.packed_stages) : std::string("per-format")) + " stages";
        }
        // Speculative prefetch: the same step without its fetch, and the
        // fetch alone (top-k and row reads of every layer on one stream):
        // the share of the fetch the step hides is 1 - (step - step without
        // fetch) / fetch alone.
        double hidden = -1, alone_ms = 0, bare_ms = 0;
        std::string timeline;
        if (spec && !output) {
          fwd.specache_set_fetch(false);
          bare_ms = time_events(fwd.stream(), o.warmup, o.repeats, [&] { fwd.specache_step(slots, toks, spec_toks); })
                        .median;
          fwd.specache_set_fetch(true);
          alone_ms = time_events(fwd.stream(), o.warmup, o.repeats, [&] { fwd.specache_plan_and_fetch(); }).median;
          hidden = std::clamp(1.0 - (t.median - bare_ms) / alone_ms, 0.0, 1.0);
          timeline = timeline_summary(fwd, slots, toks, spec_toks);
        }
        double link_bytes = 0;
        if (spec) {
          // Rows fetched per step (every layer and KV head), their bytes over
          // the link, and the pinned store.
          const double steps = double(o.warmup + o.repeats);
          link_bytes = double(fwd.specache_rows_fetched() - fetched_before) / steps * double(4 * c.head_dim);
          how += ", " + std::string(output ? "output prefetch (fetch waited for)"
                                        : fwd.specache_shared_blocks() ? "speculative prefetch (2 rows/seq, one block)"
                                                                       : "speculative prefetch (2 rows/seq, a block each)") +
                 ", top-k " + std::to_string(mode.topk) + ": " + fixed(link_bytes / double(1 << 20), 2) +
                 " MiB fetched per step (" + fixed(link_bytes / 55e9 * 1e3, 3) + " ms at 55 GB/s), host store " +
                 fixed(double(fwd.specache_host_bytes()) / gib, 2) + " GiB (" +
                 fixed(double(fwd.specache_host_bytes()) / double(b) / gib, 3) + " GiB per sequence)" +
                 (fo.specache_store_tokens < fo.max_context
                      ? " (" + std::to_string(fo.specache_store_tokens) + " rows per sequence, aliased)"
                      : std::string());
          if (hidden >= 0)
            how += "; top-k + fetch alone " + fixed(alone_ms, 3) + " ms, step without them " + fixed(bare_ms, 3) +
                   " ms: " + fixed(100 * hidden, 0) + "% of the fetch hidden" + timeline;
        }
        if (o.max_batch) {
          how = "max batch under " + fixed(budget / gib, 1) + " GiB; per sequence on the GPU " +
                fixed(double(cuda_forward::kv_device_bytes(c, fo)) / double(b) / gib, 3) + " GiB; " + how;
          at_max.emplace_back(label + " b=" + std::to_string(b), double(b) / (t.median * 1e-3));
        }
        r.points.push_back({"decode", b, ctx, false, how, t.median, t.spread, double(b) / (t.median * 1e-3), bytes,
                            bytes / r.copy_bandwidth * 1e3, used_gib()});
        if (spec) {
          r.points.back().extra.emplace_back("fetched_bytes_per_step", link_bytes);
          r.points.back().extra.emplace_back("host_store_bytes", double(fwd.specache_host_bytes()));
          if (hidden >= 0) {
            r.points.back().extra.emplace_back("fetch_alone_ms", alone_ms);
            r.points.back().extra.emplace_back("step_without_fetch_ms", bare_ms);
            r.points.back().extra.emplace_back("fetch_hidden_share", hidden);
          }
        }
    }
    if (at_max.size() > 1) {
      std::string line = "context " + std::to_string(ctx) + ", throughput at the max batch:";
      for (const auto& [what, tps] : at_max)
        line += " " + what + " " + fixed(tps, 1) + " tok/s (" + fixed(tps / at_max.front().second, 2) + "x),";
      line.pop_back();
      r.notes.push_back(line + " (ratios to the first mode)");
    }
  }
  return r;
}

#endif

}  // namespace specpipe::apps
