// packed_bench (quant_bench_packed.hpp): its shared pieces, and the v2, v3
// and v4 rows per format at the options' group and hier's at G = 128.
#include "kernels/cuda/quant_bench_packed.hpp"

#include <cmath>

#include "kernels/cuda/packed_lane_order.hpp"

namespace specpipe::kernels::cuda::quant_bench_detail {

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

packed_bench::packed_bench(const quant_bench_options& opts, const device_properties& device_props,
                           allocator& device_alloc, stream& s, buffer& query, buffer& output,
                           std::vector<quant_bench_row>& out_rows)
    : o(opts),
      props(device_props),
      dev(device_alloc),
      st(s),
      q(query),
      out(output),
      rows(out_rows),
      batch(opts.batch),
      nh(opts.n_heads),
      nkv(opts.n_kv_heads),
      d(opts.head_dim),
      ctx(opts.context),
      q_bytes(double(opts.batch) * opts.n_heads * opts.head_dim * 2),
      part(device_alloc, packed_attention_scratch_floats(opts.batch, opts.n_heads, opts.head_dim, opts.max_splits) * 4),
      ints(device_alloc, std::size_t(4 * opts.batch) * 4) {}

void packed_bench::run() {
  const std::int64_t n_quant = std::max<std::int64_t>(0, (ctx - o.window) / o.group * o.group);
  {
    const v2_cache c(dev, st, batch, nkv, d, o.group, n_quant, ctx - n_quant, o.seed + 100);
    entries(n_quant, batch);
    format_rows(c);
    specache_rows(c);
    if (d == lane_order::head_dim) specache_v4_rows(c, n_quant);
  }
  if (o.group != 128) hier128_rows();
  quantize_rows();
}

void packed_bench::entries(std::int64_t nq, int n) {
  std::vector<std::int32_t> host(std::size_t(4 * batch));
  for (int b = 0; b < n; ++b) {
    host[std::size_t(b)] = b;
    host[std::size_t(batch + b)] = std::int32_t(nq);
    host[std::size_t(2 * batch + b)] = std::int32_t(ctx);
    host[std::size_t(3 * batch + b)] = b;  // scores row
  }
  copy_to_device(ints.data(), host.data(), host.size() * 4, st.get());
  st.synchronize();
}

packed_attention_args packed_bench::args_for(const v2_cache& c, int bits, bool lower, int n, const v2_knobs& k,
                                             packed_order order) const {
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
}

void packed_bench::add_row(const char* kernel, const char* format, int bits, int n, const packed_attention_args& a,
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
}

void packed_bench::format_rows(const v2_cache& c) {
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
}

// hier at its own default group (128).
void packed_bench::hier128_rows() {
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

}  // namespace specpipe::kernels::cuda::quant_bench_detail
