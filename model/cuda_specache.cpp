// SpeCache on the GPU (cuda_forward with specache_fetch; DESIGN.md,
// SpeCache): the host store, the per-layer planner and transfer work, and
// the predecode / speculative / output steps.
//
// Where things live:
//  * host store: pinned, device-mapped bf16 rows [layer][slot][kv head]
//    [store_tokens][K | V]. Every appended row is written there by the
//    layer that appends it (copy_rows into mapped memory, right after RoPE),
//    prompt rows included, so the store never lags the window.
//  * fetched rows: per layer and slot, up to k positions per KV head
//    (ascending) and their K/V rows on the device; the packed attention reads
//    them in place of the codes (replaced_rows, indexed by slot, so the real
//    and speculative rows of a slot share one set).
//  * the step's rows: per slot the real token, then the speculative one at
//    position + 1 (entries 2i, 2i + 1), one multi-query attention block per
//    slot, so the codes are read once for both rows.
//
// Per layer of a speculative step (and of a predecode, whose single row
// plays the speculative one's part):
//   compute:  ... attention(l) [reads rows(l); writes scores(l % 2), ml(l % 2)]
//             --record attended(l)--> o-proj, MLP, layer l + 1 ...
//   planner:  wait attended(l); topk(l) over the speculative rows' scores,
//             candidates = the positions packed when the next step attends;
//             record planned(l)
//   transfer: wait planned(l); fetch(l): sort, then read the rows from the
//             host store over the link into rows(l); record fetched(l)
// Attention l + 2 waits planned(l) before it reuses scores(l % 2). After the
// logits the compute stream waits for the last fetch, so a step (and its CUDA
// graph: the waits are the graph's edges) ends with the next step's rows in
// place; the fetches of layer l overlap the compute of layers l + 1 .. L - 1.
//
// Output prefetch (the ablation): per layer, attention over the low-bit cache
// with scores, top-k and fetch on the compute stream (it waits for the link),
// attention again with the rows.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/topk.hpp"
#include "model/cuda_forward.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/fetch_rows.hpp"
#include "kernels/cuda/quantize.hpp"
#include "model/cuda_forward_impl.hpp"
#endif

namespace specpipe {

namespace {
std::int64_t store_tokens_of(const cuda_forward_options& o) {
  return o.specache_store_tokens > 0 ? std::min(o.specache_store_tokens, o.max_context) : o.max_context;
}
// Scores per (row, head): up to the speculative row's length (max_context
// + 1), padded to 16 bytes.
std::int64_t score_stride_of(const cuda_forward_options& o) { return (o.max_context + 1 + 3) / 4 * 4; }

// Bytes of each SpeCache buffer: what spec_init allocates and what
// specache_host_bytes / specache_device_bytes report.
struct specache_sizes {
  std::size_t store = 0;               // pinned host: [layer][slot][kv head][token][K | V] bf16
  std::size_t positions = 0, counts = 0;  // per layer and (slot, KV head): k positions, a count (fetched and planned alike)
  std::size_t rows = 0;                // bf16 K (and V alike) of the fetched rows
  std::size_t topk_scratch = 0, scores = 0, ml = 0;
  std::size_t hit_positions = 0, hit_counts = 0, hit_totals = 0;  // specache_hit_rate only
  std::size_t device() const {
    return 2 * (positions + counts + rows) + topk_scratch + scores + ml + hit_positions + hit_counts + hit_totals;
  }
};

specache_sizes sizes_of(const model_config& c, const cuda_forward_options& o) {
  specache_sizes z;
  if (!o.specache_fetch) return z;
  const std::size_t L = std::size_t(c.num_hidden_layers), b = std::size_t(o.max_batch);
  const std::size_t nkv = std::size_t(c.num_key_value_heads), nh = std::size_t(c.num_attention_heads);
  const std::size_t k = std::size_t(std::max(1, o.kv.topk)), d = std::size_t(c.head_dim);
  const std::size_t stride = std::size_t(score_stride_of(o));
  z.store = L * b * nkv * std::size_t(store_tokens_of(o)) * d * 4;
  z.positions = L * b * nkv * k * 4;
  z.counts = L * b * nkv * 4;
  z.rows = L * b * nkv * k * d * 2;
  z.topk_scratch = kernels::cuda::topk_scratch_floats(int(b), int(nkv), int(stride)) * 4;
  // Two layers' worth (layer parity); with the hit rate the real rows' too.
  z.scores = 2 * (o.specache_hit_rate ? 2 : 1) * b * nh * stride * 4;
  z.ml = 2 * 2 * b * nh * 2 * 4;  // every entry of a two-row step, two layers
  if (o.specache_hit_rate) {
    z.hit_positions = b * nkv * k * 4;
    z.hit_counts = b * nkv * 4;
    z.hit_totals = 16;
  }
  return z;
}
}  // namespace

std::size_t cuda_forward::specache_host_bytes(const model_config& c, const cuda_forward_options& o) {
  return sizes_of(c, o).store;
}

std::size_t cuda_forward::specache_device_bytes(const model_config& c, const cuda_forward_options& o) {
  return sizes_of(c, o).device();
}

#ifdef SPECPIPE_HAVE_CUDA

void cuda_forward::impl::spec_init() {
  auto S = std::make_unique<specache_state>();
  const specache_sizes z = sizes_of(c, opt);
  const std::size_t L = std::size_t(c.num_hidden_layers);
  S->k = opt.kv.topk;
  S->store_tokens = store_tokens_of(opt);
  S->score_stride = score_stride_of(opt);
  S->score_rows = opt.max_batch * (opt.specache_hit_rate ? 2 : 1);
  S->store = buffer(*pinned, z.store);
  S->pos = buffer(*dev, z.positions);
  S->cnt = buffer(*dev, z.counts);
  S->top_pos = buffer(*dev, z.positions);
  S->top_cnt = buffer(*dev, z.counts);
  S->rows_k = buffer(*dev, z.rows);
  S->rows_v = buffer(*dev, z.rows);
  S->top_scratch = buffer(*dev, z.topk_scratch);
  S->scores = buffer(*dev, z.scores);
  S->ml = buffer(*dev, z.ml);
  if (opt.specache_hit_rate) {
    S->hit_pos = buffer(*dev, z.hit_positions);
    S->hit_cnt = buffer(*dev, z.hit_counts);
    S->hit_totals = buffer(*dev, z.hit_totals);
    kc::fill_bytes(S->hit_totals.data(), 0, z.hit_totals, st.get());
  }
  kc::fill_bytes(S->cnt.data(), 0, S->cnt.size(), st.get());  // no rows until a predecode fetches some
  if (opt.specache_timeline) S->tl.resize(1 + 6 * L);
  S->attended.resize(L);
  S->planned.resize(L);
  S->fetched.resize(L);
  S->appended.resize(L);
  S->seeded.assign(std::size_t(opt.max_batch), false);
  st.synchronize();
  spec = std::move(S);
}

std::uint16_t* cuda_forward::impl::store_layer(int l) const {
  const std::size_t per_layer = std::size_t(opt.max_batch) * std::size_t(c.num_key_value_heads) *
                                std::size_t(spec->store_tokens) * std::size_t(2 * c.head_dim);
  return spec->store.as<std::uint16_t>() + std::size_t(l) * per_layer;
}

void cuda_forward::impl::spec_store(int l) {
  const std::int64_t d = c.head_dim;
  kc::row_copy_args a;
  a.from = store_staged ? staging_source(l) : ring_source(l);
  a.to_k = store_layer(l);
  a.to_v = store_layer(l) + d;
  a.to_row_stride = 2 * d;
  a.to_head_stride = spec->store_tokens * 2 * d;
  a.to_slot_stride = c.num_key_value_heads * a.to_head_stride;
  a.to_ring = spec->store_tokens;
  a.entry_slot = dev_ints(store_slot);
  a.entry_first = dev_ints(store_first);
  a.entry_count = dev_ints(store_count);
  a.entries = store_entries;
  a.n_kv_heads = int(c.num_key_value_heads);
  a.head_dim = int(d);
  a.max_rows = store_max_rows;
  // A speculative step's rows go to the store on the transfer stream, off
  // the layers' path: nothing this step reads them (the fetches take
  // packed positions, and these rows are the window's newest), the ring
  // row they come from is not written again before the step's end, and
  // the step ends joined with the transfer stream (spec_join), so the next
  // step's fetches find them in place. Elsewhere (prefill, the staged
  // flush, predecode, output steps) the compute stream copies them.
  auto& S = *spec;
  if (S.now == spec_phase::speculative && S.fetch && !store_staged) {
    S.appended[std::size_t(l)].record(st.get());
    S.appended[std::size_t(l)].wait_on(S.transfer.get());
    kc::copy_rows(a, S.transfer.get());
    return;
  }
  kc::copy_rows(a, st.get());
}

namespace {
// One layer's slices of the SpeCache buffers, and its parity's scores and
// (max, sum).
struct spec_layer {
  std::int32_t *pos, *cnt, *top_pos, *top_cnt;
  std::uint16_t *rows_k, *rows_v;
  float *scores, *ml;
};
spec_layer layer_of(const cuda_forward::impl& s, int l) {
  const auto& S = *s.spec;
  const std::size_t heads = std::size_t(s.opt.max_batch) * std::size_t(s.c.num_key_value_heads);
  const std::size_t sets = std::size_t(l) * heads, rows = sets * std::size_t(S.k);
  const std::size_t nh = std::size_t(s.c.num_attention_heads), parity = std::size_t(l % 2);
  return {S.pos.as<std::int32_t>() + rows,
          S.cnt.as<std::int32_t>() + sets,
          S.top_pos.as<std::int32_t>() + rows,
          S.top_cnt.as<std::int32_t>() + sets,
          S.rows_k.as<std::uint16_t>() + rows * std::size_t(s.c.head_dim),
          S.rows_v.as<std::uint16_t>() + rows * std::size_t(s.c.head_dim),
          S.scores.as<float>() + parity * std::size_t(S.score_rows) * nh * std::size_t(S.score_stride),
          S.ml.as<float>() + parity * 2 * std::size_t(s.opt.max_batch) * nh * 2};
}
}  // namespace

void cuda_forward::impl::spec_topk(const float* scores, const float* ml, std::int64_t ml_stride,
                                   const std::int32_t* row_len, std::int32_t* positions, std::int32_t* count,
                                   kc::stream_t s) {
  auto& S = *spec;
  kc::topk_args t;
  t.values = scores;
  t.stride = S.score_stride;
  t.ml = ml;
  t.ml_row_stride = ml_stride;
  t.row_len = row_len;
  t.rows = S.real;
  t.n_heads = int(c.num_attention_heads);
  t.n_kv_heads = int(c.num_key_value_heads);
  t.k = S.k;
  t.positions = positions;
  t.count = count;
  t.scratch = S.top_scratch.as<float>();
  t.max_len = int(S.score_stride);
  kc::topk_gqa(t, s);
}

void cuda_forward::impl::spec_plan(int l, const float* scores, const float* ml, std::int64_t ml_stride,
                                   kc::stream_t s) {
  const spec_layer v = layer_of(*this, l);
  spec_topk(scores, ml, ml_stride, dev_ints(plan_len), v.top_pos, v.top_cnt, s);
}

void cuda_forward::impl::spec_count_hits(int l, const float* scores, const float* ml, kc::stream_t s) {
  auto& S = *spec;
  const std::size_t nh = std::size_t(c.num_attention_heads);
  // The real rows' scores follow the speculative rows'; their (max, sum)
  // are the even entries'.
  spec_topk(scores + std::size_t(opt.max_batch) * nh * std::size_t(S.score_stride), ml, std::int64_t(4 * nh),
            dev_ints(hit_len), S.hit_pos.as<std::int32_t>(), S.hit_cnt.as<std::int32_t>(), s);
  kernels::count_hits_args h;
  h.needed = S.hit_pos.as<std::int32_t>();
  h.needed_count = S.hit_cnt.as<std::int32_t>();
  h.k = S.k;
  h.row_slot = dev_ints(plan_slot);
  const spec_layer v = layer_of(*this, l);
  h.fetched_positions = v.pos;
  h.fetched_count = v.cnt;
  h.fetched_stride = S.k;
  h.rows = S.real;
  h.n_kv_heads = int(c.num_key_value_heads);
  h.totals = S.hit_totals.as<unsigned long long>();
  kc::count_hits(h, s);
}

void cuda_forward::impl::spec_fetch(int l, kc::stream_t s) {
  auto& S = *spec;
  const spec_layer v = layer_of(*this, l);
  kernels::fetch_rows_args f;
  f.topk_positions = v.top_pos;
  f.topk_count = v.top_cnt;
  f.k = S.k;
  f.row_slot = dev_ints(plan_slot);
  f.store = store_layer(l);
  f.store_tokens = S.store_tokens;
  f.rows = S.real;
  f.n_kv_heads = int(c.num_key_value_heads);
  f.head_dim = int(c.head_dim);
  f.positions = v.pos;
  f.count = v.cnt;
  f.k_rows = v.rows_k;
  f.v_rows = v.rows_v;
  kc::fetch_rows(f, s);
}

void cuda_forward::impl::spec_attention(int l, std::int64_t m) {
  auto& S = *spec;
  const std::size_t nh = std::size_t(c.num_attention_heads);
  const spec_layer v = layer_of(*this, l);
  float* scores = v.scores;
  float* ml = v.ml;
  auto with_rows = [&](kc::packed_attention_args& a) {
    a.rows.positions = v.pos;
    a.rows.count = v.cnt;
    a.rows.entry_index = dev_ints(1);  // the slot: real and speculative rows share its set
    a.rows.stride = S.k;
    a.rows.k = v.rows_k;
    a.rows.v = v.rows_v;
  };
  auto with_scores = [&](kc::packed_attention_args& a) {
    a.scores = scores;
    a.entry_scores_row = dev_ints(scores_row);
    a.scores_stride = S.score_stride;
    a.ml = ml;
  };
  const auto cs = st.get();
  if (S.now == spec_phase::output) {
    auto low = packed_args(l, m);  // pass 1: the low-bit cache alone picks the rows
    with_scores(low);
    kc::packed_attention(low, cs);
    spec_mark(l, 2, cs);
    spec_plan(l, scores, ml, 0, cs);
    spec_mark(l, 3, cs);
    spec_mark(l, 4, cs);
    spec_fetch(l, cs);
    spec_mark(l, 5, cs);
    auto mixed = packed_args(l, m);  // pass 2: with them
    with_rows(mixed);
    kc::packed_attention(mixed, cs);
    return;
  }
  auto a = packed_args(l, m);
  with_scores(a);
  if (S.now == spec_phase::speculative) with_rows(a);
  if (!S.fetch) {  // benchmarks: the step without its fetch
    kc::packed_attention(a, cs);
    return;
  }
  if (l >= 2) S.planned[std::size_t(l - 2)].wait_on(cs);  // scores(l % 2) read by then
  kc::packed_attention(a, cs);
  // The planner's rows are the speculative entries (predecode: the only ones).
  // Speculative: entries alternate real, speculative; the planner reads
  // every second entry's (max, sum).
  const bool two = S.now == spec_phase::speculative;
  S.attended[std::size_t(l)].record(cs);
  S.attended[std::size_t(l)].wait_on(S.planner.get());
  spec_mark(l, 2, S.planner.get());
  spec_plan(l, scores, two ? ml + nh * 2 : ml, two ? std::int64_t(4 * nh) : 0, S.planner.get());
  if (two && opt.specache_hit_rate) spec_count_hits(l, scores, ml, S.planner.get());
  spec_mark(l, 3, S.planner.get());
  S.planned[std::size_t(l)].record(S.planner.get());
  S.planned[std::size_t(l)].wait_on(S.transfer.get());
  spec_mark(l, 4, S.transfer.get());
  spec_fetch(l, S.transfer.get());
  spec_mark(l, 5, S.transfer.get());
  S.fetched[std::size_t(l)].record(S.transfer.get());
}

void cuda_forward::impl::spec_join() {
  if (!spec->fetch) return;  // nothing was forked
  const std::size_t last = spec->fetched.size() - 1;
  spec->planned[last].wait_on(st.get());
  spec->fetched[last].wait_on(st.get());
}

void cuda_forward::impl::spec_forward(spec_phase ph, const char* who, std::span<const int> slots,
                                      std::span<const std::int32_t> tokens, std::span<const std::int32_t> spec_tokens,
                                      std::span<float> out_logits) {
  const auto name = [who] { return std::string("cuda_forward::") + who; };
  if (!spec) throw std::logic_error(name() + ": SpeCache's fetch is off (cuda_forward_options::specache_fetch)");
  if (draft) throw std::logic_error(name() + ": SpeCache steps run the 16-bit weights");
  const bool two = ph == spec_phase::speculative;
  const std::int64_t b = std::int64_t(slots.size()), per = two ? 2 : 1, m = b * per;
  if (std::int64_t(tokens.size()) != b || (two && std::int64_t(spec_tokens.size()) != b))
    throw std::invalid_argument(name() + ": one token" + (two ? " and one speculative token" : std::string()) +
                                " per slot expected");
  if (!out_logits.empty() && std::int64_t(out_logits.size()) < m * c.vocab_size)
    throw std::invalid_argument(name() + ": logits must hold " + std::to_string(m) + " * vocab_size floats");
  check_slots(who, slots, 1);  // one kept row per slot
  for (std::int64_t i = 0; i < b; ++i) {
    const int slot = slots[std::size_t(i)];
    if (lengths[std::size_t(slot)] == 0)
      throw std::invalid_argument(name() + ": slot " + std::to_string(slot) + " is empty; prefill it first");
    if (two && !spec->seeded[std::size_t(slot)])
      throw std::logic_error(name() + ": slot " + std::to_string(slot) +
                             " has no fetched rows yet; its first token goes through specache_predecode");
    check_token(tokens[std::size_t(i)], std::size_t(i));
    if (two) check_token(spec_tokens[std::size_t(i)], std::size_t(i));
  }
  const std::int64_t G = shape->layout.group;
  st.synchronize();  // the pinned mirror may still feed the previous copy
  std::int64_t fetched = 0;
  for (std::int64_t i = 0; i < b; ++i) {
    const int slot = slots[std::size_t(i)];
    const std::int64_t pos = lengths[std::size_t(slot)], nq = quantized_len[std::size_t(slot)];
    const std::int64_t f = flush_before(who, std::size_t(slot), per);
    const std::int64_t after = nq + f * G;
    // The real row (entry i, or 2i beside its speculative row).
    const std::int64_t e = i * per;
    set_row(e, tokens[std::size_t(i)], slot, pos);
    set_quant_row(e, after, nq / G, f);
    // The real row's scores only for the hit rate (rows after the speculative ones).
    host_ints(scores_row)[e] = !two ? std::int32_t(i) : opt.specache_hit_rate ? std::int32_t(opt.max_batch + i) : -1;
    host_ints(hit_len)[i] = std::int32_t(after);
    host_ints(store_slot)[i] = slot;
    host_ints(store_first)[i] = std::int32_t(pos);
    host_ints(store_count)[i] = 1;
    if (two) {  // the speculative row at pos + 1, attending the real one too
      set_row(e + 1, spec_tokens[std::size_t(i)], slot, pos + 1);
      set_quant_row(e + 1, after, nq / G, 0);
      host_ints(scores_row)[e + 1] = std::int32_t(i);
      host_ints(7)[i] = std::int32_t(e);  // one multi-query attention block per slot
      host_ints(8)[i] = 2;
    }
    // The planner's candidates: what is packed when the slot's next step
    // attends (output: this step). A predecode's next step runs at pos, a
    // speculative step's at pos + 1; each flushes before it appends.
    std::int64_t candidates = after;
    if (ph != spec_phase::output) {
      const std::int64_t next = ph == spec_phase::predecode ? pos : pos + 1;
      candidates = after + groups_due(next - after, shape->flush_at, G) * G;
    }
    host_ints(plan_len)[i] = std::int32_t(candidates);
    host_ints(plan_slot)[i] = slot;
    fetched += std::min<std::int64_t>(spec->k, candidates);
    quantized_len[std::size_t(slot)] = after;
  }
  upload_ints();
  spec->now = ph;
  spec->real = int(b);
  store_entries = ph == spec_phase::predecode ? 0 : int(b);  // a predecode's row is not kept
  store_max_rows = 1;
  // The real and the speculative row of a slot in one multi-query attention
  // block (cuda_forward_options::specache_blocks says when).
  if (two && specache_shares_blocks()) {
    step_blocks = int(b);
    step_max_queries = 2;
  }
  struct reset {
    impl& s;
    ~reset() {
      s.spec->now = spec_phase::none;
      s.store_entries = 0;
      s.step_blocks = 0;
      s.step_max_queries = 1;
    }
  } reset_after{*this};
  if (!spec->tl.empty()) {  // timed: eagerly, events around every layer's parts
    spec_mark(-1, 0, st.get());
    layers(m, -1, 0, m);
    spec->timed = spec->fetch;
    spec->timed_phase = ph;
  } else {
    run_step(step_key{int(b), int(per), read_bits, false, int(ph) + (spec->fetch ? 0 : 8)}, m);
  }
  spec->rows_fetched += fetched * c.num_hidden_layers * c.num_key_value_heads;
  for (std::int64_t i = 0; i < b; ++i) {
    const std::size_t slot = std::size_t(slots[std::size_t(i)]);
    if (ph != spec_phase::predecode) lengths[slot] += 1;
    if (ph != spec_phase::output) spec->seeded[slot] = true;
  }
  if (!out_logits.empty()) {
    kc::copy_to_host(out_logits.data(), logits.data(), std::size_t(m * c.vocab_size) * 4, st.get());
    st.synchronize();
  }
}

void cuda_forward::specache_predecode(std::span<const int> slots, std::span<const std::int32_t> tokens,
                                      std::span<float> logits) {
  impl_->spec_forward(impl::spec_phase::predecode, "specache_predecode", slots, tokens, {}, logits);
}

void cuda_forward::specache_step(std::span<const int> slots, std::span<const std::int32_t> tokens,
                                 std::span<const std::int32_t> spec, std::span<float> logits) {
  impl_->spec_forward(impl::spec_phase::speculative, "specache_step", slots, tokens, spec, logits);
}

void cuda_forward::specache_output_step(std::span<const int> slots, std::span<const std::int32_t> tokens,
                                        std::span<float> logits) {
  impl_->spec_forward(impl::spec_phase::output, "specache_output_step", slots, tokens, {}, logits);
}

void cuda_forward::specache_set_fetch(bool on) {
  if (!impl_->spec) throw std::logic_error("cuda_forward::specache_set_fetch: SpeCache's fetch is off");
  impl_->spec->fetch = on;
}

void cuda_forward::specache_set_timeline(bool on) {
  auto& s = *impl_;
  if (!s.spec) throw std::logic_error("cuda_forward::specache_set_timeline: no SpeCache cache");
  s.spec->tl.clear();
  if (on) s.spec->tl.resize(1 + 6 * std::size_t(s.c.num_hidden_layers));
  s.spec->timed = false;
}

void cuda_forward::specache_plan_and_fetch() {
  auto& s = *impl_;
  if (!s.spec || s.spec->real < 1)
    throw std::logic_error("cuda_forward::specache_plan_and_fetch: no SpeCache step has run");
  const std::size_t nh = std::size_t(s.c.num_attention_heads);
  // The speculative step's layout: every second entry's (max, sum).
  for (int l = 0; l < int(s.c.num_hidden_layers); ++l) {
    const spec_layer v = layer_of(s, l);
    s.spec_plan(l, v.scores, v.ml + nh * 2, std::int64_t(4 * nh), s.st.get());
    s.spec_fetch(l, s.st.get());
  }
}

std::size_t cuda_forward::specache_host_bytes() const { return impl_->spec ? impl_->spec->store.size() : 0; }

std::vector<cuda_forward::gpu_span> cuda_forward::specache_timeline() const {
  auto& s = *impl_;
  std::vector<gpu_span> out;
  if (!s.spec || !s.spec->timed) return out;
  const auto& tl = s.spec->tl;
  const auto ms = [&](std::size_t i) { return double(kc::timing_event::ms_between(tl[0], tl[i])); };
  const bool inline_fetch = s.spec->timed_phase == impl::spec_phase::output;  // whatever the option says
  for (int l = 0; l < int(s.c.num_hidden_layers); ++l) {
    const std::size_t e = 1 + 6 * std::size_t(l);
    out.push_back({0, l, "layer", ms(e), ms(e + 1)});
    // The output ablation's top-k and fetch run inside the layer, which waits for them.
    if (inline_fetch) out.push_back({0, l, "wait rows", ms(e + 2), ms(e + 5)});
    out.push_back({1, l, "top-k", ms(e + 2), ms(e + 3)});
    out.push_back({2, l, "fetch", ms(e + 4), ms(e + 5)});
  }
  return out;
}

std::pair<std::int64_t, std::int64_t> cuda_forward::specache_hits() const {
  auto& s = *impl_;
  if (!s.spec || !s.opt.specache_hit_rate) return {0, 0};
  unsigned long long t[2] = {0, 0};
  kc::copy_to_host(t, s.spec->hit_totals.data(), sizeof t, s.st.get());
  s.st.synchronize();
  return {std::int64_t(t[0]), std::int64_t(t[1])};
}

std::int64_t cuda_forward::specache_rows_fetched() const { return impl_->spec ? impl_->spec->rows_fetched : 0; }

#endif

}  // namespace specpipe
