#pragma once
// The device state of cuda_forward (model/cuda_forward.hpp): buffers, the
// quantized cache's views and the helpers that fill kernel arguments, shared
// by cuda_forward.cpp (construction, the small public methods),
// cuda_forward_layers.cpp (the forward pass over the layers) and
// cuda_forward_steps.cpp (decode and extend steps, prefills). Not a public
// interface; CUDA builds only.
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/int4_gemv.hpp"
#include "kernels/cuda/packed_attention.hpp"
#include "kernels/cuda/quantize.hpp"
#include "kernels/cuda/sampling.hpp"
#include "memory/allocator.hpp"
#include "model/cuda_forward.hpp"
#include "model/cuda_model_impl.hpp"
#include "model/cuda_packed_kv.hpp"

namespace specpipe {

namespace kc = kernels::cuda;

inline kc::quant_rule_gpu rule_of(kv_format f) {
  switch (f) {
    case kv_format::specache:
      return kc::quant_rule_gpu::specache;
    case kv_format::hier:
      return kc::quant_rule_gpu::hier;
    default:
      return kc::quant_rule_gpu::rtn;
  }
}

struct cuda_forward::impl {
  const cuda_model::impl& w;
  model_config c;
  cuda_forward_options opt;
  kc::device_properties props;
  std::unique_ptr<allocator> dev;
  std::unique_ptr<allocator> pinned;
  kc::stream st;
  kc::blas_handle blas;

  std::int64_t rows = 0;  // scratch rows
  buffer kv;              // full: [layer][k|v][slot][kv_head][capacity][head_dim] bf16
  buffer x, xn, qkv, attn, gu, act, logits, partial;
  buffer scores;  // prefill attention S and P (prefill_scratch_bytes(), may be empty)
  // Per row: tokens, slots, positions, lens; quantized: packed tokens after
  // this forward's flush, first group to flush, groups to flush; per
  // multi-query attention block: first row, rows. SpeCache (9..14): per store
  // entry the slot, first position and rows copied to the host store; per
  // attention entry its scores row (-1: none); per planner row the top-k's
  // candidate positions and the slot.
  static constexpr int int_arrays = 16;
  enum ints_of : int {
    store_slot = 9,
    store_first = 10,
    store_count = 11,
    scores_row = 12,
    plan_len = 13,
    plan_slot = 14,
    hit_len = 15  // per planner row: the real row's candidates this step (hit rate)
  };
  buffer ints_dev;   // int32 [int_arrays][rows]
  buffer ints_host;  // pinned mirror
  buffer selected;   // int32 [max_batch]
  std::vector<std::int64_t> lengths;
  // batch, rows per slot, read bits, draft weights, SpeCache phase
  using step_key = std::tuple<int, int, int, bool, int>;
  std::map<step_key, kc::graph> graphs;              // captured steps
  std::map<step_key, int> eager_runs;                // eager steps so far per key
  bool draft = false;                                // multiply by the draft's 4-bit projections
  int step_blocks = 0;                               // > 0: the packed attention runs multi-query blocks
  int step_max_queries = 1;
  std::int64_t last_rows = 0;       // logits rows of the last forward
  int attention_blocks_per_sm = 2;  // resident decode-attention blocks (occupancy)

  // Quantized cache (model/cuda_packed_kv.hpp).
  bool quant = false;
  std::optional<packed_kv_shape> shape;
  int read_bits = 0;                        // bits the attention reads (hier: 4 or 8)
  buffer packed;                            // [layer][kc | kl | ks | kz | vc | vl | vs | vz] runs
  buffer ring;                              // [layer][k|v][slot][kv_head][win_cap][head_dim] bf16
  buffer staging;                           // [layer][k|v][kv_head][staging_tokens][head_dim] bf16
  buffer aux_dev, aux_host;                 // int32 [8]: one-entry launches of the long prefill
  std::vector<std::int64_t> quantized_len;  // packed tokens per slot
  // SpeCache's fetch (specache_fetch; model/cuda_specache.cpp).
  enum class spec_phase : int { none = 0, predecode = 1, speculative = 2, output = 3 };
  struct specache_state {
    int k = 0;                       // rows per (layer, slot, KV head)
    std::int64_t store_tokens = 0;   // host rows per (slot, KV head)
    std::int64_t score_stride = 0;   // floats per scores row and head
    buffer store;                    // pinned, mapped: [layer][slot][kv head][store_tokens][K | V] bf16
    buffer pos, cnt;                 // int32 [layer][slot][kv head][k], [layer][slot][kv head]
    buffer rows_k, rows_v;           // bf16 [layer][slot][kv head][k][head_dim]
    buffer top_pos, top_cnt;         // planner output, int32 [layer][row][kv head][k], [layer][row][kv head]
    buffer top_scratch;              // topk_gqa's
    buffer scores;                   // f32 [layer % 2][row][head][score_stride]
    buffer ml;                       // f32 [layer % 2][entry][head][2]
    buffer hit_pos, hit_cnt;         // hit rate: the real rows' own top-k, [row][kv head][k], [row][kv head]
    buffer hit_totals;               // u64 [2]: needed, hits
    int score_rows = 0;              // rows per scores buffer: max_batch, or 2 * max_batch with the hit rate
    kc::stream planner, transfer;
    std::vector<kc::stream_event> attended, planned, fetched;  // per layer
    std::vector<kc::stream_event> appended;  // per layer: the step's new rows in the ring (speculative steps)
    std::vector<bool> seeded;        // per slot: rows fetched for its next step
    spec_phase now = spec_phase::none;
    int real = 0;                    // real rows (= planner rows) of the running forward
    bool fetch = true;               // benchmarks: false skips the planner and the transfer
    std::int64_t rows_fetched = 0;
    // specache_timeline: the step's start, then per layer: layer begin and
    // end, top-k begin and end, fetch begin and end (compute stream in the
    // output ablation).
    std::vector<kc::timing_event> tl;
    bool timed = false;  // the last step recorded tl
    spec_phase timed_phase = spec_phase::none;
  };
  std::unique_ptr<specache_state> spec;
  int store_entries = 0;      // > 0: layers() copies these entries' new rows to the host store
  int store_max_rows = 1;     // most rows of one store entry
  bool store_staged = false;  // the rows are in the staging area (a long prefill)

  // Resident packed-attention blocks per SM: read bits -> one query per
  // block; -(bits * 64 + queries) -> multi-query blocks of that many rows.
  mutable std::map<int, int> packed_blocks_per_sm;  // filled lazily from const packed_args

  // Allocates every buffer for `o` (cuda_forward.cpp).
  impl(const cuda_model::impl& m, const cuda_forward_options& o);

  std::int64_t qkv_dim() const { return c.q_dim() + 2 * c.kv_dim(); }
  std::size_t layer_kv_elems() const {
    return std::size_t(opt.max_batch) * std::size_t(c.num_key_value_heads) * std::size_t(opt.max_context) *
           std::size_t(c.head_dim);
  }
  std::uint16_t* k_cache(int layer) const {
    return kv.as<std::uint16_t>() + (2 * std::size_t(layer)) * layer_kv_elems();
  }
  std::uint16_t* v_cache(int layer) const {
    return kv.as<std::uint16_t>() + (2 * std::size_t(layer) + 1) * layer_kv_elems();
  }
  std::int32_t* dev_ints(int which) const { return ints_dev.as<std::int32_t>() + which * rows; }
  std::int32_t* host_ints(int which) const { return ints_host.as<std::int32_t>() + which * rows; }
  std::int32_t* aux(int i) const { return aux_dev.as<std::int32_t>() + i; }
  std::int32_t* aux_h(int i) const { return aux_host.as<std::int32_t>() + i; }

  // ---- quantized cache views --------------------------------------------
  std::vector<int> read_options() const {
    if (opt.kv.format == kv_format::hier) return {4, 8};
    return {opt.kv.bits};
  }
  bool reads_lower() const { return opt.kv.format == kv_format::hier && read_bits == 8; }
  // Byte offsets of one layer's packed arrays.
  struct packed_offsets {
    std::size_t kc, kl, ks, kz, vc, vl, vs, vz;
  };
  packed_offsets offsets() const {
    const auto& s = *shape;
    const std::size_t runs = std::size_t(s.runs());
    packed_offsets o{};
    std::size_t at = 0;
    o.kc = at;
    at += runs * std::size_t(s.k_run());
    o.kl = at;
    if (s.layout.planes() == 2) at += runs * std::size_t(s.k_run());
    o.ks = at;
    at += runs * std::size_t(s.ks_run()) * 2;
    o.kz = at;
    at += runs * std::size_t(s.ks_run()) * 2;
    o.vc = at;
    at += runs * std::size_t(s.v_run());
    o.vl = at;
    if (s.layout.planes() == 2) at += runs * std::size_t(s.v_run());
    o.vs = at;
    at += runs * std::size_t(s.vs_run()) * 2;
    o.vz = at;
    return o;
  }
  std::uint8_t* layer_packed(int l) const {
    return packed.as<std::uint8_t>() + std::size_t(l) * shape->layer_packed_bytes();
  }
  std::size_t ring_elems() const {
    return std::size_t(shape->runs()) * std::size_t(shape->win_cap) * std::size_t(c.head_dim);
  }
  std::uint16_t* ring_k(int l) const { return ring.as<std::uint16_t>() + (2 * std::size_t(l)) * ring_elems(); }
  std::uint16_t* ring_v(int l) const { return ring.as<std::uint16_t>() + (2 * std::size_t(l) + 1) * ring_elems(); }
  std::size_t staging_elems() const {
    return std::size_t(c.num_key_value_heads) * std::size_t(shape->staging_tokens) * std::size_t(c.head_dim);
  }
  std::uint16_t* staging_k(int l) const { return staging.as<std::uint16_t>() + (2 * std::size_t(l)) * staging_elems(); }
  std::uint16_t* staging_v(int l) const {
    return staging.as<std::uint16_t>() + (2 * std::size_t(l) + 1) * staging_elems();
  }

  // The byte order of the packed arrays (cuda_forward_options::packed_lane_order).
  kc::packed_order packed_order() const {
    const bool lane = opt.packed_lane_order && c.head_dim == kc::lane_order::head_dim && shape->layout.group >= 32;
    return lane ? kc::packed_order::lane : kc::packed_order::cpu;
  }
  // Whether a SpeCache step runs a slot's two rows in one block
  // (cuda_forward_options::specache_blocks; needs room for 2 x GQA columns).
  bool specache_shares_blocks() const {
    using choice = cuda_forward_options::specache_block_choice;
    if (opt.specache_blocks == choice::per_row) return false;
    if (kc::packed_attention_max_queries(int(c.num_attention_heads / c.num_key_value_heads)) < 2) return false;
    return opt.specache_blocks == choice::shared || packed_order() == kc::packed_order::lane;
  }
  kc::packed_cache_view view(int l) const {
    const auto& s = *shape;
    const auto o = offsets();
    std::uint8_t* base = layer_packed(l);
    kc::packed_cache_view v;
    v.order = packed_order();
    v.bits = s.layout.bits;
    v.group = int(s.layout.group);
    v.head_dim = int(c.head_dim);
    v.n_kv_heads = int(c.num_key_value_heads);
    v.k_codes = base + o.kc;
    v.k_scale = reinterpret_cast<const std::uint16_t*>(base + o.ks);
    v.k_zero = reinterpret_cast<const std::uint16_t*>(base + o.kz);
    v.v_codes = base + o.vc;
    v.v_scale = reinterpret_cast<const std::uint16_t*>(base + o.vs);
    v.v_zero = reinterpret_cast<const std::uint16_t*>(base + o.vz);
    if (reads_lower()) {
      v.k_lower = base + o.kl;
      v.v_lower = base + o.vl;
    }
    v.k_run = s.k_run();
    v.ks_run = s.ks_run();
    v.v_run = s.v_run();
    v.vs_run = s.vs_run();
    v.win_k = ring_k(l);
    v.win_v = ring_v(l);
    v.win_cap = int(s.win_cap);
    return v;
  }
  // The same arrays as the quantizer's destination (and the dequantizer's source).
  kc::packed_dest dest(int l) const {
    const auto& s = *shape;
    const auto o = offsets();
    std::uint8_t* base = layer_packed(l);
    const std::int64_t nkv = c.num_key_value_heads;
    kc::packed_dest d;
    d.order = packed_order();
    d.k_codes = base + o.kc;
    d.v_codes = base + o.vc;
    if (s.layout.planes() == 2) {
      d.k_lower = base + o.kl;
      d.v_lower = base + o.vl;
    }
    d.k_scale = reinterpret_cast<std::uint16_t*>(base + o.ks);
    d.k_zero = reinterpret_cast<std::uint16_t*>(base + o.kz);
    d.v_scale = reinterpret_cast<std::uint16_t*>(base + o.vs);
    d.v_zero = reinterpret_cast<std::uint16_t*>(base + o.vz);
    d.k_head = s.k_run();
    d.k_slot = nkv * s.k_run();
    d.k_group = s.layout.key_block_bytes();
    d.ks_head = s.ks_run();
    d.ks_slot = nkv * s.ks_run();
    d.ks_group = c.head_dim;
    d.v_head = s.v_run();
    d.v_slot = nkv * s.v_run();
    d.v_token = s.layout.value_row_bytes();
    d.vs_head = s.vs_run();
    d.vs_slot = nkv * s.vs_run();
    d.vs_token = s.layout.value_groups();
    return d;
  }
  kc::row_source ring_source(int l) const {
    kc::row_source r;
    r.k = ring_k(l);
    r.v = ring_v(l);
    r.head_stride = shape->win_cap * c.head_dim;
    r.slot_stride = c.num_key_value_heads * r.head_stride;
    r.row_stride = c.head_dim;
    r.ring = shape->win_cap;
    return r;
  }
  // The staging rows as "slot 0" of their own (every entry's slot maps onto them).
  kc::row_source staging_source(int l) const {
    kc::row_source r;
    r.k = staging_k(l);
    r.v = staging_v(l);
    r.head_stride = shape->staging_tokens * c.head_dim;
    r.slot_stride = 0;
    r.row_stride = c.head_dim;
    return r;
  }
  kc::quantize_args quantize_args(int l, const kc::row_source& src, const std::int32_t* slot, const std::int32_t* first,
                                  const std::int32_t* count, int entries) const {
    kc::quantize_args q;
    q.src = src;
    q.dst = dest(l);
    q.rule = rule_of(opt.kv.format);
    q.bits = shape->layout.bits;
    q.group = int(shape->layout.group);
    q.head_dim = int(c.head_dim);
    q.n_kv_heads = int(c.num_key_value_heads);
    q.entry_slot = slot;
    q.entry_first_group = first;
    q.entry_groups = count;
    q.entries = entries;
    q.max_groups = 1;
    return q;
  }
  // Packed attention of `m` rows described by the device ints.
  kc::packed_attention_args packed_args(int l, std::int64_t m) const {
    kc::packed_attention_args a;
    a.cache = view(l);
    a.q = qkv.as<std::uint16_t>();
    a.ld_q = qkv_dim();
    a.entry_slot = dev_ints(1);
    a.entry_quant = dev_ints(4);
    a.entry_len = dev_ints(3);
    a.out_bf16 = attn.as<std::uint16_t>();
    a.ld_out = c.q_dim();
    a.partial = partial.as<float>();
    a.entries = int(m);
    a.n_heads = int(c.num_attention_heads);
    a.stages = opt.packed_stages > 0                         ? opt.packed_stages
               : packed_order() == kc::packed_order::lane ? kc::packed_attention_v4_stages(read_bits)
                                                          : kc::packed_attention_stages(read_bits);
    a.v4_blocks = opt.packed_blocks;
    a.scale = 1.f / std::sqrt(float(c.head_dim));
    const auto it = packed_blocks_per_sm.find(read_bits);
    int bps = it == packed_blocks_per_sm.end() ? 2 : it->second;
    if (step_blocks > 0) {  // a multi-token step: each slot's rows in shared blocks
      a.block_first = dev_ints(7);
      a.block_count = dev_ints(8);
      a.blocks = step_blocks;
      a.max_queries = step_max_queries;
      // More query columns can mean another kernel (8 columns) with its own
      // occupancy: the split rule must use that one's.
      const int key = read_bits * 64 + step_max_queries;
      auto mq = packed_blocks_per_sm.find(-key);
      if (mq == packed_blocks_per_sm.end())
        mq = packed_blocks_per_sm.emplace(-key, kc::packed_attention_blocks_per_sm(a)).first;
      bps = mq->second;
    }
    // From the capacity, not the current lengths: a fixed launch shape per
    // batch size, replayable as a graph.
    a.splits = kc::packed_attention_splits(step_blocks > 0 ? step_blocks : int(m), int(c.num_key_value_heads),
                                           kc::packed_attention_tiles(opt.max_context, opt.max_context), props.sm_count,
                                           opt.max_splits, bps, kc::packed_attention_min_split_tiles);
    return a;
  }

  kc::gemm_args gemm_args(const std::uint16_t* in, std::int64_t ldx, const std::uint16_t* wt, void* out,
                          std::int64_t ldy, kc::gemm_out type, bool acc, std::int64_t m, std::int64_t n,
                          std::int64_t k) const;
  void gemm(const std::uint16_t* in, std::int64_t ldx, const std::uint16_t* wt, void* out, std::int64_t ldy,
            kc::gemm_out type, bool acc, std::int64_t m, std::int64_t n, std::int64_t k);
  // A projection by the 16-bit weights `wt`, or by their 4-bit copy `wq`
  // when the draft runs (the int4 GEMV, 8 rows per launch).
  void proj(const std::uint16_t* in, std::int64_t ldx, const buffer& wt, const cuda_int4& wq, void* out,
            std::int64_t ldy, kc::gemm_out type, bool acc, std::int64_t m, std::int64_t n, std::int64_t k);
  // The same by a 4-bit copy alone (the draft's projections, its lm_head).
  // With `norm_weight`, `in` is not read: the GEMV's input is
  // RMSNorm(x) by that weight, formed inside the GEMV (int4_gemv_args::norm).
  // With `rope` (the qkv weight in pair order), RoPE and the cache append
  // are the GEMV's epilogue (int4_gemv_args::rope; its slots and positions
  // are the m rows', offset here per launch of 8).
  void int4_proj(const std::uint16_t* in, std::int64_t ldx, const cuda_int4& wq, void* out, std::int64_t ldy,
                 kc::gemm_out type, bool acc, std::int64_t m, std::int64_t n, std::int64_t k,
                 const float* norm_weight = nullptr, const kc::rope_append_args* rope = nullptr);
  // Whether the draft's qkv and gate/up GEMVs normalize their own input
  // (cuda_forward_options::fuse_norm), so the two RMSNorm launches go.
  bool norm_in_gemv() const;
  // The MLP after its norm: x += (silu(xn Wg^T) * (xn Wu^T)) Wdown^T. With
  // fuse_swiglu, where the GEMV runs the gate/up projection, the SwiGLU is
  // that GEMV's epilogue (gemm_out::swiglu): one launch and the round trip
  // of [m, 2 * inter] less per layer, the same bits.
  void mlp(const cuda_layer& L, std::int64_t m);

  // The layers for m rows whose tokens/slots/positions/lens (and, quantized,
  // packed lengths and flushes) are on the device. prefill_slot >= 0: one
  // sequence's chunk at pos0 (prefill attention over the bf16 cache, or the
  // staging rows of a quantized cache, whose slot index is then 0), else m
  // decode rows (flash-decoding, or the packed attention). Logits for the
  // last `logit_rows` rows.
  void layers(std::int64_t m, int prefill_slot, std::int64_t pos0, std::int64_t logit_rows);

  // One copy of the int arrays; callers synchronize the stream before
  // rewriting the pinned mirror, so an earlier copy never sees new values.
  void upload_ints();
  void upload_aux();

  // The quantized-cache fields of row i: packed length after this forward's
  // flush, and the flush (first group, count; count 0 on all but the first
  // row of a slot).
  void set_quant_row(std::int64_t i, std::int64_t quant_after, std::int64_t first_group, std::int64_t groups);

  // Rows of one slot appended straight into the ring (a short prefill):
  // the flush due first, then n decode-style rows, logits of the last.
  void prefill_rows(int slot, std::span<const std::int32_t> tokens);

  // A prefill through the staging rows (see the file comment).
  void prefill_staged(int slot, std::span<const std::int32_t> tokens);

  // Runs layers(m) for a step of shape `key`: the captured graph, or eagerly
  // (the first time, or without graphs), or captures it (the second time).
  void run_step(const step_key& key, std::int64_t m);

  // ---- SpeCache (model/cuda_specache.cpp) ----
  void spec_init();  // allocates specache_state
  std::uint16_t* store_layer(int l) const;
  // After the append: the store entries' new rows to the host store.
  void spec_store(int l);
  // The attention of layer l in a SpeCache phase, with the planner and
  // transfer work it starts.
  void spec_attention(int l, std::int64_t m);
  void spec_topk(const float* scores, const float* ml, std::int64_t ml_stride, const std::int32_t* row_len,
                 std::int32_t* positions, std::int32_t* count, kc::stream_t s);
  void spec_plan(int l, const float* scores, const float* ml, std::int64_t ml_stride, kc::stream_t s);
  // Hit rate: the real rows' own top-k of layer l against the set they read.
  void spec_count_hits(int l, const float* scores, const float* ml, kc::stream_t s);
  void spec_fetch(int l, kc::stream_t s);
  // After the last layer: the compute stream waits for the last fetch.
  void spec_join();
  // specache_timeline's event i of layer l (0..5), or the step's start (l = -1).
  void spec_mark(int l, int i, kc::stream_t s) {
    if (spec && spec->now != spec_phase::none && !spec->tl.empty())
      spec->tl[l < 0 ? 0 : std::size_t(1 + 6 * l + i)].record(s);
  }
  void spec_forward(spec_phase ph, const char* who, std::span<const int> slots, std::span<const std::int32_t> tokens,
                    std::span<const std::int32_t> spec_tokens, std::span<float> out_logits);

  // decode() (n = 1) and extend(): n rows per slot, every row's logits.
  void step(const char* who, std::span<const int> slots, std::int64_t n, std::span<const std::int32_t> tokens,
            std::span<float> out_logits);

  // The checks every multi-slot forward makes (`who` names the caller in
  // errors; no string is built on the good path): 1..max_batch slots, each
  // valid, listed once, with room for `rows` more tokens.
  void check_slots(const char* who, std::span<const int> slots, std::int64_t rows) const;
  mutable std::vector<std::uint8_t> slot_seen;  // check_slots' scratch, max_batch entries
  // Groups the window of `slot` flushes before `rows` more rows are
  // appended (0 or 1); std::logic_error when one flush would not make room
  // (cannot happen for rows <= kv_max_append: cuda_packed_kv.hpp).
  std::int64_t flush_before(const char* who, std::size_t slot, std::int64_t rows) const;
  // Row r's token, slot, position and attended length (position + 1).
  void set_row(std::int64_t r, std::int32_t token, int slot, std::int64_t pos) {
    host_ints(0)[r] = token;
    host_ints(1)[r] = slot;
    host_ints(2)[r] = std::int32_t(pos);
    host_ints(3)[r] = std::int32_t(pos + 1);
  }

  void check_slot(int slot) const {
    if (slot < 0 || slot >= opt.max_batch)
      throw std::out_of_range("cuda_forward: slot " + std::to_string(slot) + " outside [0, " +
                              std::to_string(opt.max_batch) + ")");
  }
  void check_token(std::int32_t t, std::size_t i) const {
    if (t < 0 || t >= c.vocab_size)
      throw std::invalid_argument("cuda_forward: token " + std::to_string(i) + " has id " + std::to_string(t) +
                                  ", outside the vocabulary of " + std::to_string(c.vocab_size));
  }
};

}  // namespace specpipe
