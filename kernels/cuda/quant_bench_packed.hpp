#pragma once
// The packed-attention rows of `specpipe bench --kernels` (quant_bench.hpp),
// shared by the files that time them: the device cache the rows read
// (v2_cache), a row's switches (v2_knobs) and packed_bench, which holds one
// run's shape, buffers and rows and times each group of rows:
//   quant_bench_packed.cpp    v2, v3 and v4 per format, hier at G = 128
//   quant_bench_specache.cpp  SpeCache's mixed rows, raw scores, top-k, and
//                             its v4 step (two queries per block)
//   quant_bench_quantize.cpp  quantize on append
// Internal to the bench: only kernels/cuda/quant_bench*.cpp include it.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/device.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/packed_attention.hpp"
#include "kernels/cuda/quant_bench.hpp"
#include "memory/allocator.hpp"

namespace specpipe::kernels::cuda::quant_bench_detail {

struct timing {
  double median = 0, spread = 0;
};

template <class F>
timing time_events(stream_t s, int warmup, int repeats, F&& body) {
  event_timer t;
  for (int i = 0; i < warmup; ++i) body();
  std::vector<double> ms;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    t.start(s);
    body();
    t.stop(s);
    ms.push_back(t.elapsed_ms());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.back() - ms.front()};
}

struct format_point {
  const char* name;
  int bits;
  bool lower;
};

// The device cache of the v2 rows: every (sequence, KV head) one run per
// array, sized for the widest format (4-bit, two planes), random bytes as
// codes, finite f16 scales and zeros, a bf16 window ring.
struct v2_cache {
  int batch, nkv, d, group, win_cap;
  std::int64_t n_quant, window, groups;
  buffer kc, kl, vc, vl, ks, kz, vs, vz, wk, wv;
  v2_cache(allocator& dev, stream& st, int b, int kv, int hd, int g, std::int64_t nq, std::int64_t win,
           std::uint64_t seed)
      : batch(b), nkv(kv), d(hd), group(g), win_cap(int(win) + 16), n_quant(nq), window(win), groups(nq / g) {
    const std::size_t runs = std::size_t(b) * std::size_t(kv);
    const std::size_t plane = runs * std::size_t(nq) * std::size_t(hd) * 4 / 8 + 16;
    const std::size_t sc = runs * std::size_t(std::max<std::int64_t>(groups, 1)) * std::size_t(hd) + 8;
    const std::size_t vsc = runs * std::size_t(nq) * std::size_t(hd / std::min(g, hd)) + 8;
    const std::size_t ring = runs * std::size_t(win_cap) * std::size_t(hd);
    kc = buffer(dev, plane);
    kl = buffer(dev, plane);
    vc = buffer(dev, plane);
    vl = buffer(dev, plane);
    ks = buffer(dev, sc * 2);
    kz = buffer(dev, sc * 2);
    vs = buffer(dev, vsc * 2);
    vz = buffer(dev, vsc * 2);
    wk = buffer(dev, ring * 2);
    wv = buffer(dev, ring * 2);
    std::uint64_t k = seed;
    for (buffer* p : {&kc, &kl, &vc, &vl})
      fill_uniform_bf16(p->as<std::uint16_t>(), std::int64_t(p->size() / 2), -1, 1, ++k, st.get());
    fill_uniform_f16(ks.as<std::uint16_t>(), std::int64_t(sc), 0.01f, 0.2f, ++k, st.get());
    fill_uniform_f16(kz.as<std::uint16_t>(), std::int64_t(sc), -1.f, 0.f, ++k, st.get());
    fill_uniform_f16(vs.as<std::uint16_t>(), std::int64_t(vsc), 0.01f, 0.2f, ++k, st.get());
    fill_uniform_f16(vz.as<std::uint16_t>(), std::int64_t(vsc), -1.f, 0.f, ++k, st.get());
    fill_uniform_bf16(wk.as<std::uint16_t>(), std::int64_t(ring), -1, 1, ++k, st.get());
    fill_uniform_bf16(wv.as<std::uint16_t>(), std::int64_t(ring), -1, 1, ++k, st.get());
    st.synchronize();
  }
  packed_cache_view view(int bits, bool lower) const {
    packed_cache_view v;
    v.bits = bits;
    v.group = group;
    v.head_dim = d;
    v.n_kv_heads = nkv;
    v.k_codes = kc.as<std::uint8_t>();
    v.v_codes = vc.as<std::uint8_t>();
    if (lower) {
      v.k_lower = kl.as<std::uint8_t>();
      v.v_lower = vl.as<std::uint8_t>();
    }
    v.k_scale = ks.as<std::uint16_t>();
    v.k_zero = kz.as<std::uint16_t>();
    v.v_scale = vs.as<std::uint16_t>();
    v.v_zero = vz.as<std::uint16_t>();
    v.k_run = std::max<std::int64_t>(groups, 1) * v.key_block_bytes();
    v.ks_run = std::max<std::int64_t>(groups, 1) * d;
    v.v_run = n_quant * v.value_row_bytes();
    v.vs_run = n_quant * v.value_groups();
    v.win_k = wk.as<std::uint16_t>();
    v.win_v = wv.as<std::uint16_t>();
    v.win_cap = win_cap;
    return v;
  }
  // Bytes one entry's attention must read: codes (all planes), scales and
  // zeros, window rows.
  double bytes_per_entry(int bits, bool lower) const {
    const int planes = lower ? 2 : 1;
    const double per_group = double(planes) * d * group * bits / 8 + double(d) * 4;
    const double per_token = double(planes) * d * bits / 8 + double(d / std::min(group, d)) * 4;
    return double(nkv) * (double(groups) * per_group + double(n_quant) * per_token + double(window) * d * 4);
  }
};

// The switches of packed_attention_args and the split rule a row uses; the
// defaults are v2's measured configuration.
struct v2_knobs {
  int stages = 3;
  bool lean_smem = false;
  int combine = 0;
  int min_split_tiles = 2;
  int v4_blocks = 0;  // packed_attention_args::v4_blocks (lane order)
};

// v3's configuration per format (NOTES.md, "Packed attention v3").
v2_knobs v3_knobs(int bits, bool lower);
std::string knob_note(const v2_knobs& k);
// "<n> KiB smem, <m> blocks/SM" of a launch.
std::string smem_note(const packed_attention_args& a);

// One run of the packed rows: the options' shape, the query and output
// buffers the caller allocated (shared with the bf16 and v1 rows), the
// split scratch and the per-entry integers, and the rows appended to.
struct packed_bench {
  packed_bench(const quant_bench_options& opts, const device_properties& device_props, allocator& device_alloc,
               stream& s, buffer& query, buffer& output, std::vector<quant_bench_row>& out_rows);

  // Every group of rows, in the order the table prints them.
  void run();

  // Entries 0..n-1: sequence b in slot b, nq packed positions, the
  // options' context attended, scores row b.
  void entries(std::int64_t nq, int n);
  packed_attention_args args_for(const v2_cache& c, int bits, bool lower, int n, const v2_knobs& k,
                                 packed_order order = packed_order::cpu) const;
  // Times `body` (CUDA events after warm-up, median) as one row.
  void add_row(const char* kernel, const char* format, int bits, int n, const packed_attention_args& a, double bytes,
               const std::string& note, const std::function<void()>& body);

  void format_rows(const v2_cache& c);                        // v2, v3 and v4 per format
  void hier128_rows();                                        // hier at its own group, 128
  void specache_rows(const v2_cache& c);                      // mixed rows, raw scores, top-k
  void specache_v4_rows(const v2_cache& c, std::int64_t nq);  // SpeCache's step in lane order
  void quantize_rows();                                       // quantize on append

  const quant_bench_options& o;
  const device_properties& props;
  allocator& dev;
  stream& st;
  buffer& q;
  buffer& out;
  std::vector<quant_bench_row>& rows;
  const int batch, nh, nkv, d;
  const std::int64_t ctx;
  const double q_bytes;
  buffer part, ints;
};

}  // namespace specpipe::kernels::cuda::quant_bench_detail
