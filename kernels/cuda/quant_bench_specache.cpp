// SpeCache's rows of the packed bench (quant_bench_packed.hpp): v2 with the
// replaced 16-bit rows, v2 writing the raw scores, the GQA top-k from them,
// and the step as the model launches it in lane order (v4).
#include <cmath>

#include "kernels/cuda/quant_bench_packed.hpp"
#include "kernels/cuda/topk.hpp"

namespace specpipe::kernels::cuda::quant_bench_detail {

// SpeCache's step: 1 bit with 64 replaced rows per (sequence, KV head),
// positions spread over the context; then the raw scores of every
// sequence, and the top-64 from them.
void packed_bench::specache_rows(const v2_cache& c) {
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

// SpeCache's step in lane order (v4), as the model launches it: a slot's
// real row (ctx positions) and speculative row (ctx + 1) in one block, 1
// bit, at batch 1 and `batch`. Against the same block without side work,
// then with the raw scores of the speculative row, the 64 replaced rows
// per (slot, KV head) (spread over the context, or clustered at its start
// and end, as trained models' sink and recent tokens are), and both.
void packed_bench::specache_v4_rows(const v2_cache& c, std::int64_t nq) {
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
}

}  // namespace specpipe::kernels::cuda::quant_bench_detail
