// run_quant_attention_bench (quant_bench.hpp): one shape, the bf16 kernel as
// the baseline and every packed format through v1 here, then the packed
// kernels' rows (quant_bench_packed.hpp); CUDA events after warm-up, median.
#include "kernels/cuda/quant_bench.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/quant_bench_packed.hpp"
#include "kernels/cuda/quantized_attention.hpp"
#include "memory/allocator.hpp"
#include "memory/dtype.hpp"

namespace specpipe::kernels::cuda {
namespace {

using quant_bench_detail::format_point;
using quant_bench_detail::time_events;

// f16 scales or zeros in [lo, hi): small, finite, not zero.
void fill_f16(buffer& dst, std::size_t n, float lo, float hi, std::uint64_t seed, stream_t s) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<std::uint16_t> host(n);
  for (auto& h : host) h = f32_to_f16(u(rng));
  copy_to_device(dst.data(), host.data(), n * 2, s);
  device_synchronize();
}

}  // namespace

std::vector<quant_bench_row> run_quant_attention_bench(const quant_bench_options& o) {
  const device_properties props = query_device(0);
  auto dev = make_device_allocator(0);
  stream st;
  const int batch = o.batch, nh = o.n_heads, nkv = o.n_kv_heads, d = o.head_dim;
  const std::int64_t ctx = o.context;
  const std::int64_t n_quant = std::max<std::int64_t>(0, (ctx - o.window) / o.group * o.group);
  const std::int64_t win = ctx - n_quant;
  const std::int64_t pairs = std::int64_t(batch) * nkv;
  std::vector<quant_bench_row> rows;
  const double q_bytes = double(batch) * nh * d * 2;

  buffer q(*dev, std::size_t(batch) * nh * d * 2), out(*dev, std::size_t(batch) * nh * d * 2);
  buffer part(*dev, quant_decode_attention_scratch_floats(batch, nh, d, o.max_splits) * 4);
  fill_uniform_bf16(q.as<std::uint16_t>(), std::int64_t(batch) * nh * d, -1, 1, o.seed, st.get());

  double bf16_ms = 0;
  {  // Baseline: the full bf16 cache of the same context.
    const std::size_t elems = std::size_t(pairs) * std::size_t(ctx) * d;
    buffer k(*dev, elems * 2), v(*dev, elems * 2), ints(*dev, std::size_t(2 * batch) * 4);
    fill_uniform_bf16(k.as<std::uint16_t>(), std::int64_t(elems), -1, 1, o.seed + 1, st.get());
    fill_uniform_bf16(v.as<std::uint16_t>(), std::int64_t(elems), -1, 1, o.seed + 2, st.get());
    std::vector<std::int32_t> host(std::size_t(2 * batch));
    for (int b = 0; b < batch; ++b) {
      host[std::size_t(b)] = b;
      host[std::size_t(batch + b)] = std::int32_t(ctx);
    }
    copy_to_device(ints.data(), host.data(), host.size() * 4, st.get());
    decode_attention_args a;
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
    a.splits = decode_attention_splits(batch, nkv, ctx, props.sm_count, o.max_splits,
                                       decode_attention_blocks_per_sm(nh, nkv, d));
    const auto t = time_events(st.get(), o.warmup, o.repeats, [&] { decode_attention(a, st.get()); });
    quant_bench_row r;
    r.kernel = "bf16";
    r.format = "bf16";
    r.batch = batch;
    r.bits = 16;
    r.splits = a.splits;
    r.ms = t.median;
    r.spread_ms = t.spread;
    r.bytes = double(elems) * 2 * 2 + q_bytes;
    bf16_ms = t.median;
    rows.push_back(r);
  }

  const format_point formats[] = {{"kivi", 1, false}, {"kivi", 2, false}, {"kivi", 4, false},
                                  {"hier-int4", 4, false}, {"hier-int8", 4, true}};
  {  // v1 over the CPU's layout (its buffers freed before v2's)
  const int value_group = std::min(o.group, d), ngroups = d / value_group;
  const std::size_t groups = std::size_t(n_quant / o.group);
  // Allocated once at the largest (4-bit, two planes) size and reused.
  const std::size_t k_plane = std::size_t(pairs) * groups * std::size_t(d) * std::size_t(o.group) * 4 / 8;
  const std::size_t v_plane = std::size_t(pairs) * std::size_t(n_quant) * std::size_t(d) * 4 / 8;
  const std::size_t k_sc = std::size_t(pairs) * groups * std::size_t(d);
  const std::size_t v_sc = std::size_t(pairs) * std::size_t(n_quant) * std::size_t(ngroups);
  const std::size_t w_elems = std::size_t(pairs) * std::size_t(win) * std::size_t(d);
  buffer kc(*dev, k_plane + 16), kl(*dev, k_plane + 16), vc(*dev, v_plane + 16), vl(*dev, v_plane + 16);
  buffer ks(*dev, k_sc * 2 + 16), kz(*dev, k_sc * 2 + 16), vs(*dev, v_sc * 2 + 16), vz(*dev, v_sc * 2 + 16);
  buffer wk(*dev, w_elems * 2 + 16), wv(*dev, w_elems * 2 + 16);
  // Random code bytes (bf16 bit patterns are as good as any), finite scales.
  for (auto* b : {&kc, &kl, &vc, &vl})
    fill_uniform_bf16(b->as<std::uint16_t>(), std::int64_t(b->size() / 2), -1, 1, o.seed + 10, st.get());
  fill_f16(ks, k_sc, 0.01f, 0.2f, o.seed + 11, st.get());
  fill_f16(kz, k_sc, -1.f, 0.f, o.seed + 12, st.get());
  fill_f16(vs, v_sc, 0.01f, 0.2f, o.seed + 13, st.get());
  fill_f16(vz, v_sc, -1.f, 0.f, o.seed + 14, st.get());
  fill_uniform_bf16(wk.as<std::uint16_t>(), std::int64_t(w_elems), -1, 1, o.seed + 15, st.get());
  fill_uniform_bf16(wv.as<std::uint16_t>(), std::int64_t(w_elems), -1, 1, o.seed + 16, st.get());

  for (const auto& f : formats) {
    quant_decode_args a;
    a.q = q.as<std::uint16_t>();
    a.bits = f.bits;
    a.group = o.group;
    a.value_group = value_group;
    a.n_quant = n_quant;
    a.win_len = win;
    a.k_codes = kc.as<std::uint8_t>();
    a.v_codes = vc.as<std::uint8_t>();
    if (f.lower) {
      a.k_lower = kl.as<std::uint8_t>();
      a.v_lower = vl.as<std::uint8_t>();
    }
    a.k_scale = ks.as<std::uint16_t>();
    a.k_zero = kz.as<std::uint16_t>();
    a.v_scale = vs.as<std::uint16_t>();
    a.v_zero = vz.as<std::uint16_t>();
    a.win_k = wk.as<std::uint16_t>();
    a.win_v = wv.as<std::uint16_t>();
    a.out_bf16 = out.as<std::uint16_t>();
    a.partial = part.as<float>();
    a.batch = batch;
    a.n_heads = nh;
    a.n_kv_heads = nkv;
    a.head_dim = d;
    a.scale = 1.f / std::sqrt(float(d));
    a.splits = quant_decode_attention_splits(batch, nkv, n_quant, win, props.sm_count, o.max_splits,
                                             quant_decode_attention_blocks_per_sm(a));
    const auto t = time_events(st.get(), o.warmup, o.repeats, [&] { quant_decode_attention(a, st.get()); });
    const int planes = f.lower ? 2 : 1;
    const double per_pair = double(groups) * (planes * double(d) * o.group * f.bits / 8 + double(d) * 4) +
                            double(n_quant) * (planes * double(d) * f.bits / 8 + double(ngroups) * 4) +
                            double(win) * d * 2 * 2;
    quant_bench_row r;
    r.kernel = "v1";
    r.format = f.name;
    r.bits = f.bits * planes;
    r.batch = batch;
    r.splits = a.splits;
    r.ms = t.median;
    r.spread_ms = t.spread;
    r.bytes = per_pair * double(pairs) + q_bytes;
    rows.push_back(r);
  }
  }
  quant_bench_detail::packed_bench(o, props, *dev, st, q, out, rows).run();
  for (auto& r : rows) {
    r.gb_per_s = r.bytes / (r.ms * 1e-3) / 1e9;
    r.roofline_ms = r.bytes / o.bandwidth * 1e3;
    r.pct_of_roofline = r.roofline_ms / r.ms * 100;
    r.speedup_vs_bf16 = bf16_ms / r.ms;
  }
  return rows;
}

}  // namespace specpipe::kernels::cuda
