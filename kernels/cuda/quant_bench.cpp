// run_quant_attention_bench (quant_bench.hpp): one shape, the bf16 kernel as
// the baseline and every packed format through v1 and v2, CUDA events after
// warm-up, median.
#include "kernels/cuda/quant_bench.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <random>
#include <vector>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/packed_attention.hpp"
#include "kernels/cuda/quantize.hpp"
#include "kernels/cuda/quantized_attention.hpp"
#include "kernels/cuda/topk.hpp"
#include "memory/allocator.hpp"
#include "memory/dtype.hpp"

namespace specpipe::kernels::cuda {
namespace {

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

// f16 scales or zeros in [lo, hi): small, finite, not zero.
void fill_f16(buffer& dst, std::size_t n, float lo, float hi, std::uint64_t seed, stream_t s) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<std::uint16_t> host(n);
  for (auto& h : host) h = f32_to_f16(u(rng));
  copy_to_device(dst.data(), host.data(), n * 2, s);
  device_synchronize();
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

// v3's configuration per format (NOTES.md, "Packed attention v3"): lean
// shared memory, staged combine, splits of at least 16 tiles, 2 stages where
// the stage is large (4-bit and INT8: the lean carve-up then fits 4 resp. 2
// blocks per SM), 3 where it is small.
v2_knobs v3_knobs(int bits, bool lower) {
  v2_knobs k;
  k.lean_smem = true;
  k.combine = 1;
  k.min_split_tiles = 16;
  k.stages = bits >= 4 || lower ? 2 : 3;
  return k;
}

std::string knob_note(const v2_knobs& k) {
  std::string n = "stages " + std::to_string(k.stages);
  if (k.lean_smem) n += ", lean smem";
  if (k.combine) n += ", combine " + std::to_string(k.combine);
  if (k.min_split_tiles != 2) n += ", >= " + std::to_string(k.min_split_tiles) + " tiles/split";
  return n;
}

std::string smem_note(const packed_attention_args& a) {
  return std::to_string(packed_attention_smem_bytes(a) / 1024) + " KiB smem, " +
         std::to_string(packed_attention_blocks_per_sm(a)) + " blocks/SM";
}

void run_v2(const quant_bench_options& o, const device_properties& props, allocator& dev, stream& st, buffer& q,
            buffer& out, std::vector<quant_bench_row>& rows) {
  const int batch = o.batch, nh = o.n_heads, nkv = o.n_kv_heads, d = o.head_dim;
  const std::int64_t ctx = o.context;
  const double q_bytes = double(batch) * nh * d * 2;
  buffer part(dev, packed_attention_scratch_floats(batch, nh, d, o.max_splits) * 4);
  buffer ints(dev, std::size_t(4 * batch) * 4);
  auto entries = [&](std::int64_t nq, int n) {
    std::vector<std::int32_t> host(std::size_t(4 * batch));
    for (int b = 0; b < n; ++b) {
      host[std::size_t(b)] = b;
      host[std::size_t(batch + b)] = std::int32_t(nq);
      host[std::size_t(2 * batch + b)] = std::int32_t(ctx);
      host[std::size_t(3 * batch + b)] = b;  // scores row
    }
    copy_to_device(ints.data(), host.data(), host.size() * 4, st.get());
    st.synchronize();
  };
  auto args_for = [&](const v2_cache& c, int bits, bool lower, int n, const v2_knobs& k,
                      packed_order order = packed_order::cpu) {
    packed_attention_args a;
    a.cache = c.view(bits, lower);
    a.cache.order = order;  // random bytes are codes in either order
    a.q = q.as<std::uint16_t>();
    a.entry_slot = ints.as<std::int32_t>();
    a.entry_quant = ints.as<std::int32_t>() + batch;
    a.entry_len = ints.as<std::int32_t>() + 2 * batch;
    a.out_bf16 = out.as<std::uint16_t>();
    a.partial = part.as<float>();
    a.entries = n;
    a.n_heads = nh;
    a.stages = k.stages;
    a.lean_smem = k.lean_smem;
    a.combine = k.combine;
    a.v4_blocks = k.v4_blocks;
    a.scale = 1.f / std::sqrt(float(d));
    a.splits = packed_attention_splits(n, nkv, packed_attention_tiles(c.n_quant, ctx), props.sm_count, o.max_splits,
                                       packed_attention_blocks_per_sm(a), k.min_split_tiles);
    return a;
  };
  auto add_row = [&](const char* kernel, const char* format, int bits, int n, const packed_attention_args& a,
                     double bytes, const std::string& note, const std::function<void()>& body) {
    const auto t = time_events(st.get(), o.warmup, o.repeats, body);
    quant_bench_row r;
    r.kernel = kernel;
    r.format = format;
    r.bits = bits;
    r.batch = n;
    r.stages = a.stages;
    r.splits = a.splits;
    r.ms = t.median;
    r.spread_ms = t.spread;
    r.bytes = bytes;
    r.note = note;
    rows.push_back(r);
  };

  // SpeCache's step in lane order (v4), as the model launches it: a slot's
  // real row (ctx positions) and speculative row (ctx + 1) in one block, 1
  // bit, at batch 1 and `batch`. Against the same block without side work,
  // then with the raw scores of the speculative row, the 64 replaced rows
  // per (slot, KV head) (spread over the context, or clustered at its start
  // and end, as trained models' sink and recent tokens are), and both.
  auto specache_v4_rows = [&](const v2_cache& c, std::int64_t nq) {
    const int k = 64;
    for (const int n : {1, batch}) {
      const int ne = 2 * n;
      // Per entry: slot, packed length, attended length, scores row, set
      // index; per block: first entry, count.
      std::vector<std::int32_t> host(std::size_t(5 * ne + 2 * n));
      for (int e = 0; e < ne; ++e) {
        host[std::size_t(e)] = e / 2;
        host[std::size_t(ne + e)] = std::int32_t(nq);
        host[std::size_t(2 * ne + e)] = std::int32_t(ctx + e % 2);
        host[std::size_t(3 * ne + e)] = e % 2 ? e / 2 : -1;
        host[std::size_t(4 * ne + e)] = e / 2;
      }
      for (int b = 0; b < n; ++b) {
        host[std::size_t(5 * ne + b)] = 2 * b;
        host[std::size_t(5 * ne + n + b)] = 2;
      }
      buffer ints2(dev, host.size() * 4), q2(dev, std::size_t(ne) * nh * d * 2), out2(dev, std::size_t(ne) * nh * d * 2),
          part2(dev, packed_attention_scratch_floats(ne, nh, d, o.max_splits) * 4),
          scores(dev, std::size_t(n) * nh * std::size_t(ctx + 1) * 4), ml(dev, std::size_t(ne) * nh * 2 * 4);
      copy_to_device(ints2.data(), host.data(), host.size() * 4, st.get());
      fill_uniform_bf16(q2.as<std::uint16_t>(), std::int64_t(ne) * nh * d, -1, 1, o.seed + 400, st.get());
      const std::int32_t* ip = ints2.as<std::int32_t>();
      packed_attention_args a;
      a.cache = c.view(1, false);
      a.cache.order = packed_order::lane;
      a.q = q2.as<std::uint16_t>();
      a.entry_slot = ip;
      a.entry_quant = ip + ne;
      a.entry_len = ip + 2 * ne;
      a.out_bf16 = out2.as<std::uint16_t>();
      a.partial = part2.as<float>();
      a.entries = ne;
      a.n_heads = nh;
      a.stages = packed_attention_v4_stages(1);
      a.scale = 1.f / std::sqrt(float(d));
      a.block_first = ip + 5 * ne;
      a.block_count = ip + 5 * ne + n;
      a.blocks = n;
      a.max_queries = 2;
      a.splits = packed_attention_splits(n, nkv, packed_attention_tiles(nq, ctx + 1), props.sm_count, o.max_splits,
                                         packed_attention_blocks_per_sm(a), packed_attention_min_split_tiles);
      const double base_bytes = c.bytes_per_entry(1, false) * n + double(ne) * nh * d * 2;
      const std::string tag = "2 rows per block, batch " + std::to_string(n);
      add_row("v4-specache", "specache", 1, n, a, base_bytes, tag + ", no side work",
              [&] { packed_attention(a, st.get()); });
      auto a4 = a;  // the 128-register budget (its splits follow its blocks per SM)
      a4.v4_blocks = 4;
      a4.splits = packed_attention_splits(n, nkv, packed_attention_tiles(nq, ctx + 1), props.sm_count, o.max_splits,
                                          packed_attention_blocks_per_sm(a4), packed_attention_min_split_tiles);
      add_row("v4-specache", "specache", 1, n, a4, base_bytes, tag + ", no side work, 128-register budget",
              [&] { packed_attention(a4, st.get()); });
      auto s = a;
      s.scores = scores.as<float>();
      s.entry_scores_row = ip + 3 * ne;
      s.scores_stride = ctx + 1;
      s.ml = ml.as<float>();
      const double score_bytes = double(n) * nh * double(ctx) * 4;
      add_row("v4-specache", "specache", 1, n, s, base_bytes + score_bytes, tag + ", scores",
              [&] { packed_attention(s, st.get()); });
      for (const bool clustered : {false, true}) {
        std::vector<std::int32_t> pos(std::size_t(n * nkv * k)), cnt(std::size_t(n * nkv), k);
        for (std::size_t i = 0; i < pos.size(); ++i) {
          const std::int64_t j = std::int64_t(i % std::size_t(k));
          pos[i] = std::int32_t(!clustered ? j * (ctx / k) + 7 : j < 8 ? j : nq - 2 * (k - j));
        }
        buffer pd(dev, pos.size() * 4), cd(dev, cnt.size() * 4), rk(dev, pos.size() * std::size_t(d) * 2),
            rv(dev, pos.size() * std::size_t(d) * 2);
        copy_to_device(pd.data(), pos.data(), pos.size() * 4, st.get());
        copy_to_device(cd.data(), cnt.data(), cnt.size() * 4, st.get());
        fill_uniform_bf16(rk.as<std::uint16_t>(), std::int64_t(pos.size()) * d, -1, 1, o.seed + 410, st.get());
        fill_uniform_bf16(rv.as<std::uint16_t>(), std::int64_t(pos.size()) * d, -1, 1, o.seed + 411, st.get());
        auto m = a;
        m.rows.positions = pd.as<std::int32_t>();
        m.rows.count = cd.as<std::int32_t>();
        m.rows.entry_index = ip + 4 * ne;
        m.rows.stride = k;
        m.rows.k = rk.as<std::uint16_t>();
        m.rows.v = rv.as<std::uint16_t>();
        const double row_bytes = double(pos.size()) * d * 2 * 2;
        const std::string where = clustered ? "clustered" : "spread";
        add_row("v4-specache", "specache", 1, n, m, base_bytes + row_bytes, tag + ", 64 rows " + where,
                [&] { packed_attention(m, st.get()); });
        auto both = m;
        both.scores = s.scores;
        both.entry_scores_row = s.entry_scores_row;
        both.scores_stride = s.scores_stride;
        both.ml = s.ml;
        add_row("v4-specache", "specache", 1, n, both, base_bytes + row_bytes + score_bytes,
                tag + ", 64 rows " + where + " + scores", [&] { packed_attention(both, st.get()); });
        auto both4 = both;
        both4.v4_blocks = a4.v4_blocks;
        both4.splits = a4.splits;
        add_row("v4-specache", "specache", 1, n, both4, base_bytes + row_bytes + score_bytes,
                tag + ", 64 rows " + where + " + scores, 128-register budget",
                [&] { packed_attention(both4, st.get()); });
      }
    }
  };

  const std::int64_t n_quant = std::max<std::int64_t>(0, (ctx - o.window) / o.group * o.group);
  {
    const v2_cache c(dev, st, batch, nkv, d, o.group, n_quant, ctx - n_quant, o.seed + 100);
    entries(n_quant, batch);
    const format_point formats[] = {{"kivi", 1, false}, {"kivi", 2, false}, {"kivi", 4, false},
                                    {"hier-int4", 4, false}, {"hier-int8", 4, true}};
    for (const auto& f : formats) {
      const auto a = args_for(c, f.bits, f.lower, batch, v2_knobs{});
      const double bytes = c.bytes_per_entry(f.bits, f.lower) * batch + q_bytes;
      add_row("v2", f.name, f.bits * (f.lower ? 2 : 1), batch, a, bytes,
              std::to_string(packed_attention_smem_bytes(a) / 1024) + " KiB smem, " +
                  std::to_string(packed_attention_blocks_per_sm(a)) + " blocks/SM",
              [&] { packed_attention(a, st.get()); });
    }
    // Pipeline depth, 1 and 8 bits.
    for (const auto& f : {formats[0], formats[4]})
      for (const int stages : {2, 4}) {
        const auto a = args_for(c, f.bits, f.lower, batch, v2_knobs{stages});
        add_row("v2", f.name, f.bits * (f.lower ? 2 : 1), batch, a, c.bytes_per_entry(f.bits, f.lower) * batch + q_bytes,
                "stages " + std::to_string(stages), [&] { packed_attention(a, st.get()); });
      }
    // Batch 1 (splits fill the machine from one sequence).
    for (const auto& f : {formats[0], formats[4]}) {
      const auto a = args_for(c, f.bits, f.lower, 1, v2_knobs{});
      add_row("v2", f.name, f.bits * (f.lower ? 2 : 1), 1, a, c.bytes_per_entry(f.bits, f.lower) + q_bytes / batch,
              "batch 1", [&] { packed_attention(a, st.get()); });
    }
    // v3's switches, each alone on 1 bit, 4 bits and INT8 (against the v2
    // rows above), then all of them per format, at batch 1, and with other
    // minimum split lengths.
    for (const auto& f : {formats[0], formats[2], formats[4]}) {
      v2_knobs lean2;
      lean2.lean_smem = true;
      lean2.stages = 2;
      v2_knobs lean3 = lean2, comb, split;
      lean3.stages = 3;
      comb.combine = 1;
      split.min_split_tiles = 16;
      for (const v2_knobs& k : {comb, lean3, lean2, split}) {
        const auto a = args_for(c, f.bits, f.lower, batch, k);
        add_row("v3-knob", f.name, f.bits * (f.lower ? 2 : 1), batch, a,
                c.bytes_per_entry(f.bits, f.lower) * batch + q_bytes, knob_note(k) + ", " + smem_note(a),
                [&] { packed_attention(a, st.get()); });
      }
    }
    for (const auto& f : formats) {
      const auto a = args_for(c, f.bits, f.lower, batch, v3_knobs(f.bits, f.lower));
      add_row("v3", f.name, f.bits * (f.lower ? 2 : 1), batch, a, c.bytes_per_entry(f.bits, f.lower) * batch + q_bytes,
              knob_note(v3_knobs(f.bits, f.lower)) + ", " + smem_note(a), [&] { packed_attention(a, st.get()); });
    }
    for (const auto& f : {formats[0], formats[4]}) {
      const auto a = args_for(c, f.bits, f.lower, 1, v3_knobs(f.bits, f.lower));
      add_row("v3", f.name, f.bits * (f.lower ? 2 : 1), 1, a, c.bytes_per_entry(f.bits, f.lower) + q_bytes / batch,
              "batch 1, " + knob_note(v3_knobs(f.bits, f.lower)), [&] { packed_attention(a, st.get()); });
    }
    for (const auto& f : {formats[0], formats[2]})
      for (const int min_tiles : {8, 32}) {
        v2_knobs k = v3_knobs(f.bits, f.lower);
        k.min_split_tiles = min_tiles;
        const auto a = args_for(c, f.bits, f.lower, batch, k);
        add_row("v3", f.name, f.bits * (f.lower ? 2 : 1), batch, a,
                c.bytes_per_entry(f.bits, f.lower) * batch + q_bytes, knob_note(k),
                [&] { packed_attention(a, st.get()); });
      }
    // v4: the cache read in lane order (packed_attention_v4.cu), per
    // format at its default stages and at the others, then at batch 1.
    if (d == lane_order::head_dim) {
      for (const auto& f : formats)
        for (const int stages : {0, 2, 3, 4}) {
          v2_knobs k = v3_knobs(f.bits, f.lower);
          const int dflt = packed_attention_v4_stages(f.lower ? 8 : f.bits);
          if (stages == dflt) continue;
          k.stages = stages == 0 ? dflt : stages;
          const auto a = args_for(c, f.bits, f.lower, batch, k, packed_order::lane);
          add_row("v4", f.name, f.bits * (f.lower ? 2 : 1), batch, a,
                  c.bytes_per_entry(f.bits, f.lower) * batch + q_bytes,
                  std::string(stages == 0 ? "default, " : "") + "stages " + std::to_string(k.stages) + ", " +
                      smem_note(a),
                  [&] { packed_attention(a, st.get()); });
        }
      for (const auto& f : {formats[0], formats[2], formats[4]}) {
        v2_knobs k = v3_knobs(f.bits, f.lower);
        k.stages = packed_attention_v4_stages(f.lower ? 8 : f.bits);
        const auto a = args_for(c, f.bits, f.lower, 1, k, packed_order::lane);
        add_row("v4", f.name, f.bits * (f.lower ? 2 : 1), 1, a, c.bytes_per_entry(f.bits, f.lower) + q_bytes / batch,
                "batch 1, " + smem_note(a), [&] { packed_attention(a, st.get()); });
      }
      // The 128-register budget (4 blocks per SM) for the 1-4-bit reads, at
      // each stage count that fits a fourth block, then at batch 1.
      for (const auto& f : formats) {
        if (f.lower) continue;
        for (const int stages : {2, 3, 4}) {
          v2_knobs k = v3_knobs(f.bits, f.lower);
          k.stages = stages;
          k.v4_blocks = 4;
          const auto a = args_for(c, f.bits, f.lower, batch, k, packed_order::lane);
          if (packed_attention_blocks_per_sm(a) < 4) continue;
          add_row("v4-128reg", f.name, f.bits, batch, a, c.bytes_per_entry(f.bits, f.lower) * batch + q_bytes,
                  "stages " + std::to_string(stages) + ", " + smem_note(a), [&] { packed_attention(a, st.get()); });
        }
      }
      for (const auto& f : {formats[0], formats[2]}) {
        v2_knobs k = v3_knobs(f.bits, f.lower);
        k.stages = packed_attention_v4_stages(f.bits);
        k.v4_blocks = 4;
        const auto a = args_for(c, f.bits, f.lower, 1, k, packed_order::lane);
        add_row("v4-128reg", f.name, f.bits, 1, a, c.bytes_per_entry(f.bits, f.lower) + q_bytes / batch,
                "batch 1, " + smem_note(a), [&] { packed_attention(a, st.get()); });
      }
    }
    // SpeCache's step: 1 bit with 64 replaced rows per (sequence, KV head),
    // positions spread over the context; then the raw scores of every
    // sequence, and the top-64 from them.
    {
      const int k = 64;
      std::vector<std::int32_t> pos(std::size_t(batch * nkv * k)), cnt(std::size_t(batch * nkv), k);
      for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = std::int32_t((i % std::size_t(k)) * (ctx / k) + 7);
      buffer pd(dev, pos.size() * 4), cd(dev, cnt.size() * 4), rk(dev, pos.size() * std::size_t(d) * 2),
          rv(dev, pos.size() * std::size_t(d) * 2);
      copy_to_device(pd.data(), pos.data(), pos.size() * 4, st.get());
      copy_to_device(cd.data(), cnt.data(), cnt.size() * 4, st.get());
      fill_uniform_bf16(rk.as<std::uint16_t>(), std::int64_t(pos.size()) * d, -1, 1, o.seed + 200, st.get());
      fill_uniform_bf16(rv.as<std::uint16_t>(), std::int64_t(pos.size()) * d, -1, 1, o.seed + 201, st.get());
      auto a = args_for(c, 1, false, batch, v2_knobs{});
      a.rows.positions = pd.as<std::int32_t>();
      a.rows.count = cd.as<std::int32_t>();
      a.rows.stride = k;
      a.rows.k = rk.as<std::uint16_t>();
      a.rows.v = rv.as<std::uint16_t>();
      const double row_bytes = double(pos.size()) * d * 2 * 2;
      add_row("v2-mixed", "specache", 1, batch, a, c.bytes_per_entry(1, false) * batch + q_bytes + row_bytes,
              "64 replaced rows per (sequence, KV head)", [&] { packed_attention(a, st.get()); });
      buffer scores(dev, std::size_t(batch) * nh * std::size_t(ctx) * 4), ml(dev, std::size_t(batch) * nh * 2 * 4);
      auto s = args_for(c, 1, false, batch, v2_knobs{});
      s.scores = scores.as<float>();
      s.entry_scores_row = ints.as<std::int32_t>() + 3 * batch;
      s.scores_stride = ctx;
      s.ml = ml.as<float>();
      const double score_bytes = double(batch) * nh * double(ctx) * 4;
      add_row("v2-scores", "specache", 1, batch, s, c.bytes_per_entry(1, false) * batch + q_bytes + score_bytes,
              "raw scores of every sequence written (f32)", [&] { packed_attention(s, st.get()); });
      buffer scratch(dev, topk_scratch_floats(batch, nkv, int(ctx)) * 4), tp(dev, std::size_t(batch * nkv * k) * 4),
          tc(dev, std::size_t(batch * nkv) * 4);
      topk_args t;
      t.values = scores.as<float>();
      t.stride = ctx;
      t.ml = ml.as<float>();
      t.row_len = ints.as<std::int32_t>() + 2 * batch;
      t.rows = batch;
      t.n_heads = nh;
      t.n_kv_heads = nkv;
      t.k = k;
      t.positions = tp.as<std::int32_t>();
      t.count = tc.as<std::int32_t>();
      t.scratch = scratch.as<float>();
      t.max_len = int(ctx);
      packed_attention_args none = s;
      none.splits = 0;
      // Scores read once, the averages written once and read by the four
      // radix passes and the two gathers.
      add_row("topk", "specache", 1, batch, none, score_bytes + 7.0 * double(batch) * nkv * double(ctx) * 4,
              "k=64 per (sequence, KV head) from raw scores", [&] { topk_gqa(t, st.get()); });
      topk_args fixed = t;
      fixed.fixed_digits = true;
      add_row("topk", "specache", 1, batch, none, score_bytes + 7.0 * double(batch) * nkv * double(ctx) * 4,
              "the same, first radix digit fixed at bits 24-31 (the version before)",
              [&] { topk_gqa(fixed, st.get()); });
    }
    if (d == lane_order::head_dim) specache_v4_rows(c, n_quant);
  }
  // hier at its own default group (128).
  if (o.group != 128) {
    const std::int64_t nq128 = std::max<std::int64_t>(0, (ctx - o.window) / 128 * 128);
    const v2_cache c(dev, st, batch, nkv, d, 128, nq128, ctx - nq128, o.seed + 300);
    entries(nq128, batch);
    for (const bool lower : {false, true}) {
      const auto a = args_for(c, 4, lower, batch, v2_knobs{});
      add_row("v2", lower ? "hier-int8" : "hier-int4", lower ? 8 : 4, batch, a,
              c.bytes_per_entry(4, lower) * batch + q_bytes, "G=128", [&] { packed_attention(a, st.get()); });
      const v2_knobs k = v3_knobs(4, lower);
      const auto b = args_for(c, 4, lower, batch, k);
      add_row("v3", lower ? "hier-int8" : "hier-int4", lower ? 8 : 4, batch, b,
              c.bytes_per_entry(4, lower) * batch + q_bytes, "G=128, " + knob_note(k) + ", " + smem_note(b),
              [&] { packed_attention(b, st.get()); });
      if (d == lane_order::head_dim) {
        v2_knobs k4 = k;
        k4.stages = packed_attention_v4_stages(lower ? 8 : 4);
        const auto b4 = args_for(c, 4, lower, batch, k4, packed_order::lane);
        add_row("v4", lower ? "hier-int8" : "hier-int4", lower ? 8 : 4, batch, b4,
                c.bytes_per_entry(4, lower) * batch + q_bytes,
                "G=128, stages " + std::to_string(k4.stages) + ", " + smem_note(b4),
                [&] { packed_attention(b4, st.get()); });
        if (!lower)  // QuantSpec's draft read at the 128-register budget
          for (const int stages : {2, 3}) {
            v2_knobs kb = k4;
            kb.stages = stages;
            kb.v4_blocks = 4;
            const auto bb = args_for(c, 4, false, batch, kb, packed_order::lane);
            add_row("v4-128reg", "hier-int4", 4, batch, bb, c.bytes_per_entry(4, false) * batch + q_bytes,
                    "G=128, stages " + std::to_string(stages) + ", " + smem_note(bb),
                    [&] { packed_attention(bb, st.get()); });
          }
      }
    }
  }
  // Quantize on append: one group of every sequence and KV head (one layer),
  // and the same launch with nothing due (what most decode steps pay).
  for (const auto& f : {format_point{"kivi", 2, false}, format_point{"hier-int8", 4, true}}) {
    const int g = f.lower ? 128 : o.group;
    const int win_cap = 2 * g + 16;
    const v2_cache c(dev, st, batch, nkv, d, g, std::int64_t(4) * g, 0, o.seed + 400);
    buffer ring(dev, std::size_t(batch) * nkv * std::size_t(win_cap) * d * 2 * 2);
    fill_uniform_bf16(ring.as<std::uint16_t>(), std::int64_t(ring.size() / 2), -1, 1, o.seed + 401, st.get());
    buffer qi(dev, std::size_t(3 * batch) * 4);
    std::vector<std::int32_t> host(std::size_t(3 * batch));
    for (int b = 0; b < batch; ++b) {
      host[std::size_t(b)] = b;
      host[std::size_t(batch + b)] = 1;
      host[std::size_t(2 * batch + b)] = 1;
    }
    const auto view = c.view(4, f.lower);
    quantize_args qa;
    qa.src.k = ring.as<std::uint16_t>();
    qa.src.v = ring.as<std::uint16_t>() + std::size_t(batch) * nkv * std::size_t(win_cap) * d;
    qa.src.head_stride = std::int64_t(win_cap) * d;
    qa.src.slot_stride = std::int64_t(nkv) * qa.src.head_stride;
    qa.src.row_stride = d;
    qa.src.ring = win_cap;
    qa.dst.k_codes = const_cast<std::uint8_t*>(view.k_codes);
    qa.dst.v_codes = const_cast<std::uint8_t*>(view.v_codes);
    if (f.lower) {
      qa.dst.k_lower = const_cast<std::uint8_t*>(view.k_lower);
      qa.dst.v_lower = const_cast<std::uint8_t*>(view.v_lower);
    }
    qa.dst.k_scale = const_cast<std::uint16_t*>(view.k_scale);
    qa.dst.k_zero = const_cast<std::uint16_t*>(view.k_zero);
    qa.dst.v_scale = const_cast<std::uint16_t*>(view.v_scale);
    qa.dst.v_zero = const_cast<std::uint16_t*>(view.v_zero);
    const int bits = f.lower ? 4 : f.bits;
    qa.dst.k_head = std::int64_t(4) * d * g * bits / 8;
    qa.dst.k_slot = nkv * qa.dst.k_head;
    qa.dst.k_group = std::int64_t(d) * g * bits / 8;
    qa.dst.ks_head = std::int64_t(4) * d;
    qa.dst.ks_slot = nkv * qa.dst.ks_head;
    qa.dst.ks_group = d;
    const int ng = d / std::min(g, d);
    qa.dst.v_head = std::int64_t(4) * g * d * bits / 8;
    qa.dst.v_slot = nkv * qa.dst.v_head;
    qa.dst.v_token = std::int64_t(d) * bits / 8;
    qa.dst.vs_head = std::int64_t(4) * g * ng;
    qa.dst.vs_slot = nkv * qa.dst.vs_head;
    qa.dst.vs_token = ng;
    qa.rule = f.lower ? quant_rule_gpu::hier : quant_rule_gpu::rtn;
    qa.bits = bits;
    qa.group = g;
    qa.head_dim = d;
    qa.n_kv_heads = nkv;
    qa.entry_slot = qi.as<std::int32_t>();
    qa.entry_first_group = qi.as<std::int32_t>() + batch;
    qa.entry_groups = qi.as<std::int32_t>() + 2 * batch;
    qa.entries = batch;
    qa.max_groups = 1;
    packed_attention_args none;
    const double in_bytes = double(batch) * nkv * g * d * 2 * 2;
    for (const bool idle : {false, true}) {
      for (int b = 0; b < batch; ++b) host[std::size_t(2 * batch + b)] = idle ? 0 : 1;
      copy_to_device(qi.data(), host.data(), host.size() * 4, st.get());
      st.synchronize();
      add_row(idle ? "quantize-idle" : "quantize", f.name, bits * (f.lower ? 2 : 1), batch, none,
              idle ? 0.0 : in_bytes, "G=" + std::to_string(g) + ", one layer", [&] { quantize_groups(qa, st.get()); });
    }
    if (d == lane_order::head_dim) {  // the same groups written in lane order (v4's cache)
      for (int b = 0; b < batch; ++b) host[std::size_t(2 * batch + b)] = 1;
      copy_to_device(qi.data(), host.data(), host.size() * 4, st.get());
      st.synchronize();
      quantize_args ql = qa;
      ql.dst.order = packed_order::lane;
      add_row("quantize", f.name, bits * (f.lower ? 2 : 1), batch, none, in_bytes,
              "G=" + std::to_string(g) + ", one layer, lane order", [&] { quantize_groups(ql, st.get()); });
    }
  }
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
  run_v2(o, props, *dev, st, q, out, rows);
  for (auto& r : rows) {
    r.gb_per_s = r.bytes / (r.ms * 1e-3) / 1e9;
    r.roofline_ms = r.bytes / o.bandwidth * 1e3;
    r.pct_of_roofline = r.roofline_ms / r.ms * 100;
    r.speedup_vs_bf16 = bf16_ms / r.ms;
  }
  return rows;
}

}  // namespace specpipe::kernels::cuda
