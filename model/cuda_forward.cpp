// cuda_forward: the Llama decode/prefill pass on the GPU (see cuda_forward.hpp).
//
// Per layer, for m rows (decode batch or prefill chunk):
//   xn = rmsnorm(x) ; qkv = xn Wqkv^T ; RoPE(q, k) + append k, v to the cache ;
//   a = attention(q, cache) ; x += a Wo^T (fused into the GEMM epilogue) ;
//   xn = rmsnorm(x) ; gu = xn Wgu^T ; h = silu(g) * u ; x += h Wdown^T
// then logits = rmsnorm(x) lm_head^T. x is the f32 residual stream.
//
// With a quantized cache (kivi, specache, hier; model/cuda_packed_kv.hpp) the
// append becomes: quantize the window's oldest G rows when due (before the
// append, as model/quantized_cache.hpp), then RoPE + append into the window
// ring; attention is the packed attention over codes + window. A prefill
// longer than the ring attends in full precision through the staging area
// (bf16 rows of the whole context: the packed part dequantized, the window
// copied, the prompt appended), then quantizes the groups due and moves the
// rest of the window back to the ring.
#include "model/cuda_forward.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/cuda_packed_kv.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/int4_gemv.hpp"
#include "kernels/cuda/packed_attention.hpp"
#include "kernels/cuda/quantize.hpp"
#include "kernels/cuda/sampling.hpp"
#include "model/cuda_model_impl.hpp"
#endif

namespace specpipe {

std::size_t cuda_forward::kv_bytes_per_token(const model_config& c) {
  return std::size_t(c.num_hidden_layers) * 2 * std::size_t(c.kv_dim()) * 2;
}

double cuda_forward::kv_bytes_per_token(const model_config& c, const kv_mode& mode) {
  if (mode.format == kv_format::full) return double(kv_bytes_per_token(c));
  const kv_layout l = mode.layout(c);
  return (double(l.key_group_bytes()) / double(l.group) + double(l.value_token_bytes())) *
         double(l.n_kv_heads * l.n_layers);
}

double cuda_forward::kv_read_bytes_per_token(const model_config& c, const kv_mode& mode) {
  const double all = kv_bytes_per_token(c, mode);
  if (mode.format != kv_format::hier || mode.bits != 4) return all;
  // Lower planes: 4 bits per K and V element.
  return all - double(c.head_dim * c.num_key_value_heads * c.num_hidden_layers);
}

namespace {
bool quantized_mode(const cuda_forward_options& o) { return o.kv.format != kv_format::full; }
// Rows of the largest multi-token step (decode: max_batch).
std::int64_t step_rows(const cuda_forward_options& o) { return o.max_batch * std::max<std::int64_t>(1, o.max_step_tokens); }
std::int64_t scratch_rows(const cuda_forward_options& o) {
  return std::max<std::int64_t>(step_rows(o), o.prefill_chunk);
}
// Attention entries the split scratch holds: step rows, or (quantized) the
// rows of a short prefill as well.
std::int64_t attention_rows(const cuda_forward_options& o) {
  return quantized_mode(o) ? scratch_rows(o) : step_rows(o);
}
packed_kv_shape packed_shape(const model_config& c, const cuda_forward_options& o) {
  return packed_kv_shape::make(o.kv, c, o.max_batch, o.max_context, o.kv_max_append, o.kv_staging_tokens);
}
// Scores and probabilities of the tensor-core prefill attention: f32 + bf16
// per (head, query, key), for a whole chunk at the full context when that
// fits the budget, else for thinner passes (prefill_attention_cublas).
std::size_t prefill_scratch_bytes(const model_config& c, const cuda_forward_options& o) {
  if (!o.prefill_attention_cublas) return 0;
  const std::size_t keys = (std::size_t(o.max_context) + 7) / 8 * 8;
  const std::size_t full = std::size_t(c.num_attention_heads) * std::size_t(o.prefill_chunk) * keys * 6;
  return std::min(full, o.prefill_scratch_bytes);
}
}  // namespace

std::size_t cuda_forward::kv_device_bytes(const model_config& c, const cuda_forward_options& o) {
  if (quantized_mode(o)) return packed_shape(c, o).total_bytes();
  return kv_bytes_per_token(c) * std::size_t(o.max_batch) * std::size_t(o.max_context);
}

std::size_t cuda_forward::device_bytes(const model_config& c, const cuda_forward_options& o) {
  const std::size_t r = std::size_t(scratch_rows(o));
  const std::size_t kv = kv_device_bytes(c, o);
  const std::size_t act = r * (4 * std::size_t(c.hidden_size) + 2 * std::size_t(c.hidden_size) +
                               2 * std::size_t(c.q_dim() + 2 * c.kv_dim()) + 2 * std::size_t(c.q_dim()) +
                               2 * 3 * std::size_t(c.intermediate_size) + 4 * 4);
  const std::size_t logits = std::size_t(step_rows(o)) * std::size_t(c.vocab_size) * 4;
  const std::size_t partial = std::size_t(attention_rows(o)) * std::size_t(c.num_attention_heads) *
                              std::size_t(o.max_splits) * std::size_t(c.head_dim + 2) * 4;
  return kv + act + logits + partial + prefill_scratch_bytes(c, o) + (std::size_t(32) << 20) /* cuBLAS workspace */;
}

#ifndef SPECPIPE_HAVE_CUDA

struct cuda_forward::impl {};

cuda_forward::cuda_forward(const cuda_model&, const cuda_forward_options&) {
  throw std::runtime_error("the CUDA backend is not part of this build (configure with -DSPECPIPE_CUDA=ON)");
}
cuda_forward::~cuda_forward() = default;
const model_config& cuda_forward::config() const { throw std::logic_error("no CUDA backend"); }
const cuda_forward_options& cuda_forward::options() const { throw std::logic_error("no CUDA backend"); }
std::int64_t cuda_forward::length(int) const { return 0; }
std::int64_t cuda_forward::quantized(int) const { return 0; }
void cuda_forward::truncate(int, std::int64_t) {}
void cuda_forward::set_kv_read(int) {}
int cuda_forward::kv_read() const { return 0; }
void cuda_forward::set_draft_weights(bool) {}
bool cuda_forward::draft_weights() const { return false; }
void cuda_forward::extend(std::span<const int>, std::int64_t, std::span<const std::int32_t>, std::span<float>) {}
void cuda_forward::prefill(int, std::span<const std::int32_t>, std::span<float>) {}
void cuda_forward::decode(std::span<const int>, std::span<const std::int32_t>, std::span<float>) {}
void cuda_forward::select(const sampling_params&, std::uint64_t, std::span<std::int32_t>) {}
void cuda_forward::fill_random_kv(int, std::int64_t, std::uint64_t) {}
void cuda_forward::synchronize() const {}
void* cuda_forward::stream() const { return nullptr; }

#else

namespace kc = kernels::cuda;

namespace {
kc::quant_rule_gpu rule_of(kv_format f) {
  switch (f) {
    case kv_format::specache: return kc::quant_rule_gpu::specache;
    case kv_format::hier: return kc::quant_rule_gpu::hier;
    default: return kc::quant_rule_gpu::rtn;
  }
}
}  // namespace

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
  buffer scores;     // prefill attention S and P (prefill_scratch_bytes(), may be empty)
  // Per row: tokens, slots, positions, lens; quantized: packed tokens after
  // this forward's flush, first group to flush, groups to flush; per
  // multi-query attention block: first row, rows.
  static constexpr int int_arrays = 9;
  buffer ints_dev;   // int32 [int_arrays][rows]
  buffer ints_host;  // pinned mirror
  buffer selected;   // int32 [max_batch]
  std::vector<std::int64_t> lengths;
  using step_key = std::tuple<int, int, int, bool>;  // batch, rows per slot, read bits, draft weights
  std::map<step_key, kc::graph> graphs;  // captured steps
  std::map<step_key, int> eager_runs;    // eager steps so far per key
  bool draft = false;                    // multiply by the draft's 4-bit projections
  int step_blocks = 0;                   // > 0: the packed attention runs multi-query blocks
  int step_max_queries = 1;
  std::int64_t last_rows = 0;       // logits rows of the last forward
  int attention_blocks_per_sm = 2;  // resident decode-attention blocks (occupancy)

  // Quantized cache (model/cuda_packed_kv.hpp).
  bool quant = false;
  std::optional<packed_kv_shape> shape;
  int read_bits = 0;                 // bits the attention reads (hier: 4 or 8)
  buffer packed;                     // [layer][kc | kl | ks | kz | vc | vl | vs | vz] runs
  buffer ring;                       // [layer][k|v][slot][kv_head][win_cap][head_dim] bf16
  buffer staging;                    // [layer][k|v][kv_head][staging_tokens][head_dim] bf16
  buffer aux_dev, aux_host;          // int32 [8]: one-entry launches of the long prefill
  std::vector<std::int64_t> quantized_len;  // packed tokens per slot
  // Resident packed-attention blocks per SM: read bits -> one query per
  // block; -(bits * 64 + queries) -> multi-query blocks of that many rows.
  mutable std::map<int, int> packed_blocks_per_sm;  // filled lazily from const packed_args

  impl(const cuda_model::impl& m, const cuda_forward_options& o) : w(m), c(m.config), opt(o) {
    kc::set_device(m.device);
    props = kc::query_device(m.device);
    dev = make_device_allocator(m.device);
    pinned = make_pinned_allocator();
    rows = scratch_rows(opt);
    quant = quantized_mode(opt);
    const std::size_t r = std::size_t(rows);
    if (quant) {
      shape = packed_shape(c, opt);
      read_bits = opt.kv.bits;
      const std::size_t per_layer = shape->layer_packed_bytes();
      packed = buffer(*dev, per_layer * std::size_t(c.num_hidden_layers));
      ring = buffer(*dev, shape->layer_window_bytes() * std::size_t(c.num_hidden_layers));
      if (shape->staging_tokens > 0) staging = buffer(*dev, shape->staging_bytes());
      aux_dev = buffer(*dev, 8 * 4);
      aux_host = buffer(*pinned, 8 * 4);
      quantized_len.assign(std::size_t(opt.max_batch), 0);
    } else {
      kv = buffer(*dev, kv_bytes_per_token(c) * std::size_t(opt.max_batch) * std::size_t(opt.max_context));
    }
    x = buffer(*dev, r * std::size_t(c.hidden_size) * 4);
    xn = buffer(*dev, r * std::size_t(c.hidden_size) * 2);
    qkv = buffer(*dev, r * std::size_t(qkv_dim()) * 2);
    attn = buffer(*dev, r * std::size_t(c.q_dim()) * 2);
    gu = buffer(*dev, r * std::size_t(2 * c.intermediate_size) * 2);
    act = buffer(*dev, r * std::size_t(c.intermediate_size) * 2);
    logits = buffer(*dev, std::size_t(step_rows(opt)) * std::size_t(c.vocab_size) * 4);
    partial = buffer(*dev, kc::decode_attention_scratch_floats(int(attention_rows(opt)), int(c.num_attention_heads),
                                                               int(c.head_dim), opt.max_splits) * 4);
    if (const std::size_t sb = prefill_scratch_bytes(c, opt); sb > 0) scores = buffer(*dev, sb);
    ints_dev = buffer(*dev, int_arrays * r * 4);
    ints_host = buffer(*pinned, int_arrays * r * 4);
    selected = buffer(*dev, std::size_t(step_rows(opt)) * 4);
    lengths.assign(std::size_t(opt.max_batch), 0);
    if (quant) {
      // The occupancy of each read this cache allows (hier: INT4 and INT8).
      for (const int bits : read_options()) {
        const int saved = read_bits;
        read_bits = bits;
        packed_blocks_per_sm[bits] = kc::packed_attention_blocks_per_sm(packed_args(0, 1));
        read_bits = saved;
      }
      return;
    }
    try {
      attention_blocks_per_sm = kc::decode_attention_blocks_per_sm(int(c.num_attention_heads),
                                                                   int(c.num_key_value_heads), int(c.head_dim));
    } catch (const std::invalid_argument&) {
      // A head shape the decode kernel lacks (e.g. head_dim 16): prefill
      // still works; decode() reports the same error when it is called.
    }
  }

  std::int64_t qkv_dim() const { return c.q_dim() + 2 * c.kv_dim(); }
  std::size_t layer_kv_elems() const {
    return std::size_t(opt.max_batch) * std::size_t(c.num_key_value_heads) * std::size_t(opt.max_context) *
           std::size_t(c.head_dim);
  }
  std::uint16_t* k_cache(int layer) const { return kv.as<std::uint16_t>() + (2 * std::size_t(layer)) * layer_kv_elems(); }
  std::uint16_t* v_cache(int layer) const { return kv.as<std::uint16_t>() + (2 * std::size_t(layer) + 1) * layer_kv_elems(); }
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
  std::uint8_t* layer_packed(int l) const { return packed.as<std::uint8_t>() + std::size_t(l) * shape->layer_packed_bytes(); }
  std::size_t ring_elems() const {
    return std::size_t(shape->runs()) * std::size_t(shape->win_cap) * std::size_t(c.head_dim);
  }
  std::uint16_t* ring_k(int l) const { return ring.as<std::uint16_t>() + (2 * std::size_t(l)) * ring_elems(); }
  std::uint16_t* ring_v(int l) const { return ring.as<std::uint16_t>() + (2 * std::size_t(l) + 1) * ring_elems(); }
  std::size_t staging_elems() const {
    return std::size_t(c.num_key_value_heads) * std::size_t(shape->staging_tokens) * std::size_t(c.head_dim);
  }
  std::uint16_t* staging_k(int l) const { return staging.as<std::uint16_t>() + (2 * std::size_t(l)) * staging_elems(); }
  std::uint16_t* staging_v(int l) const { return staging.as<std::uint16_t>() + (2 * std::size_t(l) + 1) * staging_elems(); }

  kc::packed_cache_view view(int l) const {
    const auto& s = *shape;
    const auto o = offsets();
    std::uint8_t* base = layer_packed(l);
    kc::packed_cache_view v;
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
  kc::quantize_args quantize_args(int l, const kc::row_source& src, const std::int32_t* slot,
                                  const std::int32_t* first, const std::int32_t* count, int entries) const {
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
    a.stages = opt.packed_stages > 0 ? opt.packed_stages : kc::packed_attention_stages(read_bits);
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
                                           kc::packed_attention_tiles(opt.max_context, opt.max_context),
                                           props.sm_count, opt.max_splits, bps,
                                           kc::packed_attention_min_split_tiles);
    return a;
  }

  kc::gemm_args gemm_args(const std::uint16_t* in, std::int64_t ldx, const std::uint16_t* wt, void* out,
                          std::int64_t ldy, kc::gemm_out type, bool acc, std::int64_t m, std::int64_t n,
                          std::int64_t k) const {
    kc::gemm_args a;
    a.x = in;
    a.ldx = ldx;
    a.w = wt;
    a.ldw = k;
    a.y = out;
    a.ldy = ldy;
    a.out = type;
    a.accumulate = acc;
    a.m = m;
    a.n = n;
    a.k = k;
    a.overlap_launch = opt.overlap_launch;
    a.k_split = opt.gemv_k_split;
    a.unroll = opt.gemv_unroll;
    return a;
  }
  void gemm(const std::uint16_t* in, std::int64_t ldx, const std::uint16_t* wt, void* out, std::int64_t ldy,
            kc::gemm_out type, bool acc, std::int64_t m, std::int64_t n, std::int64_t k) {
    kc::gemm(blas.get(), gemm_args(in, ldx, wt, out, ldy, type, acc, m, n, k), st.get(), opt.gemm);
  }
  // A projection by the 16-bit weights `wt`, or by their 4-bit copy `wq`
  // when the draft runs (the int4 GEMV, 8 rows per launch).
  void proj(const std::uint16_t* in, std::int64_t ldx, const buffer& wt, const cuda_int4& wq, void* out,
            std::int64_t ldy, kc::gemm_out type, bool acc, std::int64_t m, std::int64_t n, std::int64_t k) {
    if (!draft) {
      gemm(in, ldx, wt.as<std::uint16_t>(), out, ldy, type, acc, m, n, k);
      return;
    }
    const std::size_t out_size = type == kc::gemm_out::f32 ? 4 : 2;
    for (std::int64_t r = 0; r < m; r += kc::int4_gemv_max_rows) {
      kc::int4_gemv_args a;
      a.x = in + r * ldx;
      a.ldx = ldx;
      a.codes = wq.codes.as<std::uint8_t>();
      a.code_stride = wq.code_stride;
      a.scale = wq.scale.as<std::uint16_t>();
      a.zero = wq.zero.as<std::uint16_t>();
      a.group = wq.group;
      a.y = static_cast<unsigned char*>(out) + std::size_t(r * ldy) * out_size;
      a.ldy = ldy;
      a.out = type;
      a.accumulate = acc;
      a.m = std::min<std::int64_t>(kc::int4_gemv_max_rows, m - r);
      a.n = n;
      a.k = k;
      kc::int4_gemv(a, st.get());
    }
  }
  // x += silu(g) * u Wdown^T. With fuse_swiglu, where the GEMV runs it, the
  // SwiGLU is fused into its input load: one launch and one round trip of
  // `act` less per layer, but each warp recomputes silu(g) * u for all of k.
  void mlp_down(const cuda_layer& L, std::int64_t m) {
    const std::int64_t h = c.hidden_size, inter = c.intermediate_size;
    if (draft) {
      kc::swiglu(gu.as<std::uint16_t>(), 2 * inter, act.as<std::uint16_t>(), inter, m, inter, st.get());
      proj(act.as<std::uint16_t>(), inter, L.wdown, L.wdown_q, x.data(), h, kc::gemm_out::f32, true, m, h, inter);
      return;
    }
    const auto plain = gemm_args(act.as<std::uint16_t>(), inter, L.wdown.as<std::uint16_t>(), x.data(), h,
                                 kc::gemm_out::f32, true, m, h, inter);
    auto fused = gemm_args(gu.as<std::uint16_t>(), 2 * inter, L.wdown.as<std::uint16_t>(), x.data(), h,
                           kc::gemm_out::f32, true, m, h, inter);
    fused.in = kc::gemm_in::swiglu;
    if (opt.fuse_swiglu && kc::gemm_resolve(plain, opt.gemm) == kc::gemm_impl::gemv && kc::gemv_supported(fused)) {
      kc::gemv(fused, st.get());
      return;
    }
    kc::swiglu(gu.as<std::uint16_t>(), 2 * inter, act.as<std::uint16_t>(), inter, m, inter, st.get());
    kc::gemm(blas.get(), plain, st.get(), opt.gemm);
  }

  // The layers for m rows whose tokens/slots/positions/lens (and, quantized,
  // packed lengths and flushes) are on the device. prefill_slot >= 0: one
  // sequence's chunk at pos0 (prefill attention over the bf16 cache, or the
  // staging rows of a quantized cache, whose slot index is then 0), else m
  // decode rows (flash-decoding, or the packed attention). Logits for the
  // last `logit_rows` rows.
  void layers(std::int64_t m, int prefill_slot, std::int64_t pos0, std::int64_t logit_rows) {
    const std::int64_t h = c.hidden_size, q = c.q_dim(), inter = c.intermediate_size;
    const float eps = float(c.rms_norm_eps);
    const float scale = 1.f / std::sqrt(float(c.head_dim));
    const bool staged = quant && prefill_slot >= 0;
    kc::embedding(w.embed.as<std::uint16_t>(), c.vocab_size, h, dev_ints(0), m, x.as<float>(), h, st.get());
    for (std::size_t li = 0; li < w.layers.size(); ++li) {
      const auto& L = w.layers[li];
      const int l = int(li);
      kc::rmsnorm(x.as<float>(), h, nullptr, 0, L.attn_norm.as<float>(), xn.as<std::uint16_t>(), h, m, h, eps, st.get());
      proj(xn.as<std::uint16_t>(), h, L.wqkv, L.wqkv_q, qkv.data(), qkv_dim(), kc::gemm_out::bf16, false, m, qkv_dim(), h);
      if (quant && !staged)  // the window's oldest groups, when due, before the append
        kc::quantize_groups(quantize_args(l, ring_source(l), dev_ints(1), dev_ints(5), dev_ints(6), int(m)), st.get());
      kc::rope_append_args ra;
      ra.qkv = qkv.as<std::uint16_t>();
      ra.ld_qkv = qkv_dim();
      if (!quant) {
        ra.k_cache = k_cache(l);
        ra.v_cache = v_cache(l);
        ra.capacity = opt.max_context;
      } else if (staged) {
        ra.k_cache = staging_k(l);
        ra.v_cache = staging_v(l);
        ra.capacity = shape->staging_tokens;
      } else {
        ra.k_cache = ring_k(l);
        ra.v_cache = ring_v(l);
        ra.capacity = shape->win_cap;
        ra.ring = shape->win_cap;
      }
      ra.slots = dev_ints(1);
      ra.positions = dev_ints(2);
      ra.inv_freq = w.inv_freq.as<float>();
      ra.tokens = m;
      ra.n_heads = int(c.num_attention_heads);
      ra.n_kv_heads = int(c.num_key_value_heads);
      ra.head_dim = int(c.head_dim);
      kc::rope_append(ra, st.get());
      if (prefill_slot >= 0) {
        kc::prefill_attention_args pa;
        pa.q = qkv.as<std::uint16_t>();
        pa.ld_q = qkv_dim();
        pa.k_cache = staged ? staging_k(l) : k_cache(l);
        pa.v_cache = staged ? staging_v(l) : v_cache(l);
        pa.capacity = staged ? shape->staging_tokens : opt.max_context;
        pa.slot = staged ? 0 : prefill_slot;
        pa.pos0 = pos0;
        pa.n = m;
        pa.out = attn.as<std::uint16_t>();
        pa.ld_out = q;
        pa.n_heads = int(c.num_attention_heads);
        pa.n_kv_heads = int(c.num_key_value_heads);
        pa.head_dim = int(c.head_dim);
        pa.scale = scale;
        if (!opt.prefill_attention_cublas ||
            !kc::prefill_attention_cublas(blas.get(), pa, scores.data(), scores.size(), st.get()))
          kc::prefill_attention(pa, st.get());
      } else if (quant) {
        kc::packed_attention(packed_args(l, m), st.get());
      } else {
        kc::decode_attention_args da;
        da.q = qkv.as<std::uint16_t>();
        da.ld_q = qkv_dim();
        da.k_cache = k_cache(l);
        da.v_cache = v_cache(l);
        da.capacity = opt.max_context;
        da.slots = dev_ints(1);
        da.lens = dev_ints(3);
        da.out = attn.as<std::uint16_t>();
        da.ld_out = q;
        da.partial = partial.as<float>();
        da.batch = int(m);
        da.n_heads = int(c.num_attention_heads);
        da.n_kv_heads = int(c.num_key_value_heads);
        da.head_dim = int(c.head_dim);
        // From the capacity, not the current lengths: the launch shape stays
        // fixed so the step can be replayed as a graph; each sequence is
        // still cut into equal parts of its own length on the device.
        da.splits = kc::decode_attention_splits(int(m), int(c.num_key_value_heads), opt.max_context,
                                                props.sm_count, opt.max_splits, attention_blocks_per_sm);
        da.scale = scale;
        kc::decode_attention(da, st.get());
      }
      proj(attn.as<std::uint16_t>(), q, L.wo, L.wo_q, x.data(), h, kc::gemm_out::f32, true, m, h, q);
      kc::rmsnorm(x.as<float>(), h, nullptr, 0, L.mlp_norm.as<float>(), xn.as<std::uint16_t>(), h, m, h, eps, st.get());
      proj(xn.as<std::uint16_t>(), h, L.wgu, L.wgu_q, gu.data(), 2 * inter, kc::gemm_out::bf16, false, m, 2 * inter, h);
      mlp_down(L, m);
    }
    if (logit_rows == 0) return;  // an inner prefill chunk: no logits
    const std::int64_t first = m - logit_rows;
    kc::rmsnorm(x.as<float>() + first * h, h, nullptr, 0, w.final_norm.as<float>(), xn.as<std::uint16_t>(), h,
                logit_rows, h, eps, st.get());
    gemm(xn.as<std::uint16_t>(), h, w.lm_head_ptr(), logits.data(), c.vocab_size, kc::gemm_out::f32, false,
         logit_rows, c.vocab_size, h);
    last_rows = logit_rows;
  }

  // One copy of the int arrays; callers synchronize the stream before
  // rewriting the pinned mirror, so an earlier copy never sees new values.
  void upload_ints() {
    kc::copy_to_device(ints_dev.data(), ints_host.data(), std::size_t(int_arrays * rows) * 4, st.get());
  }
  void upload_aux() { kc::copy_to_device(aux_dev.data(), aux_host.data(), 8 * 4, st.get()); }

  // The quantized-cache fields of row i: packed length after this forward's
  // flush, and the flush (first group, count; count 0 on all but the first
  // row of a slot).
  void set_quant_row(std::int64_t i, std::int64_t quant_after, std::int64_t first_group, std::int64_t groups) {
    host_ints(4)[i] = std::int32_t(quant_after);
    host_ints(5)[i] = std::int32_t(first_group);
    host_ints(6)[i] = std::int32_t(groups);
  }

  // Rows of one slot appended straight into the ring (a short prefill):
  // the flush due first, then n decode-style rows, logits of the last.
  void prefill_rows(int slot, std::span<const std::int32_t> tokens) {
    const std::int64_t n = std::int64_t(tokens.size());
    auto& len = lengths[std::size_t(slot)];
    auto& nq = quantized_len[std::size_t(slot)];
    const std::int64_t G = shape->layout.group;
    const std::int64_t f = groups_due(len - nq, shape->flush_at, G);
    st.synchronize();  // the pinned mirror may still feed the previous copy
    for (std::int64_t i = 0; i < n; ++i) {
      host_ints(0)[i] = tokens[std::size_t(i)];
      host_ints(1)[i] = slot;
      host_ints(2)[i] = std::int32_t(len + i);
      host_ints(3)[i] = std::int32_t(len + i + 1);
      set_quant_row(i, nq + f * G, nq / G, i == 0 ? f : 0);
    }
    upload_ints();
    layers(n, -1, 0, 1);
    len += n;
    nq += f * G;
  }

  // A prefill through the staging rows (see the file comment).
  void prefill_staged(int slot, std::span<const std::int32_t> tokens) {
    const auto& s = *shape;
    const std::int64_t n = std::int64_t(tokens.size()), G = s.layout.group;
    auto& len = lengths[std::size_t(slot)];
    auto& nq = quantized_len[std::size_t(slot)];
    if (len + n > s.staging_tokens)
      throw std::invalid_argument("cuda_forward::prefill: " + std::to_string(len) + " + " + std::to_string(n) +
                                  " tokens exceed the " + std::to_string(s.staging_tokens) +
                                  " positions of the prefill staging area (kv_staging_tokens)");
    const int L = int(c.num_hidden_layers);
    auto flush = [&](std::int64_t first_group, std::int64_t groups, bool from_staging) {
      if (groups <= 0) return;
      st.synchronize();
      *aux_h(0) = slot;
      *aux_h(1) = std::int32_t(first_group);
      *aux_h(2) = std::int32_t(groups);
      upload_aux();
      for (int l = 0; l < L; ++l) {
        auto qa = quantize_args(l, from_staging ? staging_source(l) : ring_source(l), aux(0), aux(1), aux(2), 1);
        qa.max_groups = int(groups);
        kc::quantize_groups(qa, st.get());
      }
    };
    // Rows [first, first + count) between the ring (slot) and the staging rows.
    auto move_rows = [&](std::int64_t first, std::int64_t count, bool to_staging) {
      if (count <= 0) return;
      st.synchronize();
      *aux_h(0) = slot;
      *aux_h(3) = std::int32_t(first);
      *aux_h(4) = std::int32_t(count);
      upload_aux();
      for (int l = 0; l < L; ++l) {
        const kc::row_source rs = ring_source(l), ss = staging_source(l);
        kc::row_copy_args a;
        a.from = to_staging ? rs : ss;
        const kc::row_source& to = to_staging ? ss : rs;
        a.to_k = const_cast<std::uint16_t*>(to.k);
        a.to_v = const_cast<std::uint16_t*>(to.v);
        a.to_slot_stride = to.slot_stride;
        a.to_head_stride = to.head_stride;
        a.to_row_stride = to.row_stride;
        a.to_ring = to.ring;
        a.entry_slot = aux(0);
        a.entry_first = aux(3);
        a.entry_count = aux(4);
        a.entries = 1;
        a.n_kv_heads = int(c.num_key_value_heads);
        a.head_dim = int(c.head_dim);
        a.max_rows = int(count);
        kc::copy_rows(a, st.get());
      }
    };
    // 1. What the CPU cache flushes before this append.
    const std::int64_t f = groups_due(len - nq, s.flush_at, G);
    flush(nq / G, f, false);
    nq += f * G;
    // 2. The context so far as bf16 rows: the packed part dequantized (the
    //    current read), the window copied.
    if (nq > 0)
      for (int l = 0; l < L; ++l) {
        kc::dequantize_args d;
        d.src = dest(l);
        d.lower = reads_lower();
        d.bits = s.layout.bits;
        d.group = int(G);
        d.head_dim = int(c.head_dim);
        d.n_kv_heads = int(c.num_key_value_heads);
        d.slot = slot;
        d.groups = int(nq / G);
        d.to_k = staging_k(l);
        d.to_v = staging_v(l);
        d.to_head_stride = s.staging_tokens * c.head_dim;
        d.to_row_stride = c.head_dim;
        kc::dequantize_rows(d, st.get());
      }
    move_rows(nq, len - nq, true);
    // 3. The prompt in chunks, attending the staging rows in full precision.
    for (std::size_t off = 0; off < tokens.size(); off += std::size_t(opt.prefill_chunk)) {
      const std::int64_t m = std::min<std::int64_t>(opt.prefill_chunk, std::int64_t(tokens.size() - off));
      st.synchronize();
      for (std::int64_t i = 0; i < m; ++i) {
        host_ints(0)[i] = tokens[off + std::size_t(i)];
        host_ints(1)[i] = 0;  // the staging rows are slot 0 of their own
        host_ints(2)[i] = std::int32_t(len + i);
        host_ints(3)[i] = std::int32_t(len + i + 1);
      }
      upload_ints();
      const bool last = off + std::size_t(m) == tokens.size();
      layers(m, slot, len, last ? 1 : 0);
      len += m;
    }
    // 4. The groups the CPU would flush at the next append, then the rest of
    //    the window back into the ring.
    const std::int64_t f2 = groups_due(len - nq, s.flush_at, G);
    flush(nq / G, f2, true);
    nq += f2 * G;
    move_rows(nq, len - nq, false);
  }

  // decode() (n = 1) and extend(): n rows per slot, every row's logits.
  void step(const char* who, std::span<const int> slots, std::int64_t n, std::span<const std::int32_t> tokens,
            std::span<float> out_logits) {
    const std::string name = std::string("cuda_forward::") + who;
    const std::int64_t b = std::int64_t(slots.size());
    if (b < 1 || b > opt.max_batch)
      throw std::invalid_argument(name + ": " + std::to_string(slots.size()) + " slots; expected 1.." +
                                  std::to_string(opt.max_batch));
    const std::int64_t n_cap =
        quant ? std::min<std::int64_t>(opt.max_step_tokens, shape->max_append) : opt.max_step_tokens;
    if (n < 1 || (n > 1 && n > n_cap))
      throw std::invalid_argument(name + ": " + std::to_string(n) + " tokens per slot; at most " +
                                  std::to_string(std::max<std::int64_t>(1, n_cap)) + " (max_step_tokens" +
                                  (quant ? ", kv_max_append)" : ")"));
    if (std::int64_t(tokens.size()) != b * n)
      throw std::invalid_argument(name + ": " + std::to_string(tokens.size()) + " tokens for " + std::to_string(b) +
                                  " slots of " + std::to_string(n) + " rows");
    if (draft && !w.draft_group) throw std::logic_error(name + ": the model has no draft weights");
    std::vector<bool> seen(std::size_t(opt.max_batch), false);
    for (std::size_t i = 0; i < slots.size(); ++i) {
      check_slot(slots[i]);
      if (seen[std::size_t(slots[i])])
        throw std::invalid_argument(name + ": slot " + std::to_string(slots[i]) + " listed twice");
      seen[std::size_t(slots[i])] = true;
      if (lengths[std::size_t(slots[i])] + n > opt.max_context)
        throw std::invalid_argument(name + ": slot " + std::to_string(slots[i]) + " holds " +
                                    std::to_string(lengths[std::size_t(slots[i])]) + " of " +
                                    std::to_string(opt.max_context) + " tokens; " + std::to_string(n) +
                                    " more do not fit");
    }
    for (std::size_t i = 0; i < tokens.size(); ++i) check_token(tokens[i], i);
    const std::int64_t m = b * n;
    if (!out_logits.empty() && std::int64_t(out_logits.size()) < m * c.vocab_size)
      throw std::invalid_argument(name + ": logits must hold " + std::to_string(m) + " * vocab_size floats");
    // Multi-query attention blocks: each slot's rows in runs of as many as
    // share a block's query columns.
    const int gq = int(c.num_attention_heads / c.num_key_value_heads);
    const std::int64_t per_block =
        quant && n > 1 ? std::min<std::int64_t>(n, kc::packed_attention_max_queries(gq)) : 1;
    st.synchronize();  // the pinned mirror may still feed the previous copy
    int blocks = 0;
    for (std::int64_t i = 0; i < b; ++i) {
      const std::size_t slot = std::size_t(slots[std::size_t(i)]);
      const std::int64_t pos = lengths[slot];
      std::int64_t f = 0, nq = 0;
      if (quant) {
        const std::int64_t G = shape->layout.group;
        nq = quantized_len[slot];
        f = groups_due(pos - nq, shape->flush_at, G);
        if (f > 1 || pos - nq - f * G + n > shape->win_cap)  // cuda_packed_kv.hpp: cannot happen
          throw std::logic_error(name + ": slot " + std::to_string(slot) + " holds a window of " +
                                 std::to_string(pos - nq) + " tokens, more than one flush can make room for");
      }
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t r = i * n + j;
        host_ints(0)[r] = tokens[std::size_t(r)];
        host_ints(1)[r] = std::int32_t(slot);
        host_ints(2)[r] = std::int32_t(pos + j);
        host_ints(3)[r] = std::int32_t(pos + j + 1);
        if (quant) set_quant_row(r, nq + f * shape->layout.group, nq / shape->layout.group, j == 0 ? f : 0);
      }
      if (per_block > 1)
        for (std::int64_t j = 0; j < n; j += per_block, ++blocks) {
          host_ints(7)[blocks] = std::int32_t(i * n + j);
          host_ints(8)[blocks] = std::int32_t(std::min(per_block, n - j));
        }
      if (quant) quantized_len[slot] = nq + f * shape->layout.group;
    }
    upload_ints();
    step_blocks = blocks;
    step_max_queries = int(per_block);
    struct reset {
      impl& s;
      ~reset() {
        s.step_blocks = 0;
        s.step_max_queries = 1;
      }
    } reset_after{*this};
    const step_key key{int(b), int(n), quant ? read_bits : 0, draft};
    auto g = graphs.find(key);
    if (g != graphs.end()) {
      g->second.launch(st.get());
      last_rows = m;
    } else if (!opt.use_graphs || eager_runs[key] < 1) {
      // The first step of each shape runs eagerly: kernels configure their
      // shared-memory limits and cuBLAS picks its algorithms outside a capture.
      layers(m, -1, 0, m);
      ++eager_runs[key];
    } else {
      kc::graph::begin_capture(st.get());
      try {
        layers(m, -1, 0, m);
      } catch (...) {
        try {
          kc::graph::end_capture(st.get());
        } catch (...) {
        }
        throw;
      }
      auto captured = kc::graph::end_capture(st.get());
      captured.launch(st.get());
      graphs.emplace(key, std::move(captured));
    }
    for (std::int64_t i = 0; i < b; ++i) lengths[std::size_t(slots[std::size_t(i)])] += n;
    if (!out_logits.empty()) {
      kc::copy_to_host(out_logits.data(), logits.data(), std::size_t(m * c.vocab_size) * 4, st.get());
      st.synchronize();
    }
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

cuda_forward::cuda_forward(const cuda_model& model, const cuda_forward_options& options) {
  if (options.max_batch < 1 || options.max_context < 1 || options.prefill_chunk < 1 || options.max_splits < 1)
    throw std::invalid_argument("cuda_forward: max_batch, max_context, prefill_chunk and max_splits must be >= 1");
  if (options.gemv_unroll != 2 && options.gemv_unroll != 4)
    throw std::invalid_argument("cuda_forward: gemv_unroll must be 2 or 4, got " +
                                std::to_string(options.gemv_unroll));
  if (options.packed_stages != 0 && (options.packed_stages < 2 || options.packed_stages > 4))
    throw std::invalid_argument("cuda_forward: packed_stages must be 0 (per format), 2, 3 or 4, got " +
                                std::to_string(options.packed_stages));
  impl_ = std::make_unique<impl>(model.get(), options);
}

cuda_forward::~cuda_forward() = default;

const model_config& cuda_forward::config() const { return impl_->c; }
const cuda_forward_options& cuda_forward::options() const { return impl_->opt; }

std::int64_t cuda_forward::length(int slot) const {
  impl_->check_slot(slot);
  return impl_->lengths[std::size_t(slot)];
}

std::int64_t cuda_forward::quantized(int slot) const {
  impl_->check_slot(slot);
  return impl_->quant ? impl_->quantized_len[std::size_t(slot)] : 0;
}

void cuda_forward::truncate(int slot, std::int64_t n) {
  impl_->check_slot(slot);
  auto& len = impl_->lengths[std::size_t(slot)];
  if (n < 0) throw std::invalid_argument("cuda_forward::truncate: n must be >= 0");
  if (impl_->quant) {
    auto& nq = impl_->quantized_len[std::size_t(slot)];
    if (n == 0) {
      len = nq = 0;
      return;
    }
    if (n < len && n < nq)
      throw std::invalid_argument("cuda_forward::truncate: cannot roll slot " + std::to_string(slot) + " back to " +
                                  std::to_string(n) + " tokens: positions 0.." + std::to_string(nq - 1) +
                                  " are quantized and only the window after them can be dropped");
  }
  len = std::min(len, n);
}

void cuda_forward::set_kv_read(int bits) {
  auto& s = *impl_;
  const auto ok = s.read_options();
  if (!s.quant || std::find(ok.begin(), ok.end(), bits) == ok.end())
    throw std::invalid_argument("cuda_forward::set_kv_read: " + std::to_string(bits) + " bits is not a read of the " +
                                s.opt.kv.describe() + " cache");
  s.read_bits = bits;
}

int cuda_forward::kv_read() const { return impl_->quant ? impl_->read_bits : 16; }

void cuda_forward::set_draft_weights(bool draft) {
  if (draft && !impl_->w.draft_group)
    throw std::logic_error("cuda_forward::set_draft_weights: the model has no draft weights (cuda_model::make_draft)");
  impl_->draft = draft;
}

bool cuda_forward::draft_weights() const { return impl_->draft; }

void cuda_forward::prefill(int slot, std::span<const std::int32_t> tokens, std::span<float> logits) {
  auto& s = *impl_;
  s.check_slot(slot);
  if (tokens.empty()) throw std::invalid_argument("cuda_forward::prefill: no tokens");
  for (std::size_t i = 0; i < tokens.size(); ++i) s.check_token(tokens[i], i);
  auto& len = s.lengths[std::size_t(slot)];
  if (len + std::int64_t(tokens.size()) > s.opt.max_context)
    throw std::invalid_argument("cuda_forward::prefill: " + std::to_string(len) + " + " +
                                std::to_string(tokens.size()) + " tokens exceed the capacity of " +
                                std::to_string(s.opt.max_context));
  if (!logits.empty() && std::int64_t(logits.size()) < s.c.vocab_size)
    throw std::invalid_argument("cuda_forward::prefill: logits must hold vocab_size floats");
  if (s.quant) {
    const std::int64_t n = std::int64_t(tokens.size()), G = s.shape->layout.group;
    const std::int64_t nq = s.quantized_len[std::size_t(slot)];
    const std::int64_t due = groups_due(len - nq, s.shape->flush_at, G);
    const std::int64_t window = len - nq - due * G;
    if (due <= 1 && n <= s.shape->max_append && window + n <= s.shape->win_cap && n <= s.rows)
      s.prefill_rows(slot, tokens);
    else
      s.prefill_staged(slot, tokens);
  } else {
    for (std::size_t off = 0; off < tokens.size(); off += std::size_t(s.opt.prefill_chunk)) {
      const std::int64_t n = std::min<std::int64_t>(s.opt.prefill_chunk, std::int64_t(tokens.size() - off));
      s.st.synchronize();  // the pinned mirror may still feed the previous copy
      for (std::int64_t i = 0; i < n; ++i) {
        s.host_ints(0)[i] = tokens[off + std::size_t(i)];
        s.host_ints(1)[i] = slot;
        s.host_ints(2)[i] = std::int32_t(len + i);
        s.host_ints(3)[i] = std::int32_t(len + i + 1);
      }
      s.upload_ints();
      const bool last = off + std::size_t(n) == tokens.size();
      s.layers(n, slot, len, last ? 1 : 0);
      len += n;
    }
  }
  if (!logits.empty()) {
    kc::copy_to_host(logits.data(), s.logits.data(), std::size_t(s.c.vocab_size) * 4, s.st.get());
    s.st.synchronize();
  }
}

void cuda_forward::decode(std::span<const int> slots, std::span<const std::int32_t> tokens, std::span<float> logits) {
  impl_->step("decode", slots, 1, tokens, logits);
}

void cuda_forward::extend(std::span<const int> slots, std::int64_t n, std::span<const std::int32_t> tokens,
                          std::span<float> logits) {
  impl_->step("extend", slots, n, tokens, logits);
}

void cuda_forward::select(const sampling_params& p, std::uint64_t counter, std::span<std::int32_t> out) {
  auto& s = *impl_;
  if (s.last_rows < 1) throw std::logic_error("cuda_forward::select: no forward has run");
  if (std::int64_t(out.size()) < s.last_rows)
    throw std::invalid_argument("cuda_forward::select: out must hold " + std::to_string(s.last_rows) + " ids");
  // sample_rows checks temperature, top_k and top_p itself.
  auto* sel = s.selected.as<std::int32_t>();
  if (p.temperature <= 0.f) {
    kc::argmax_rows(s.logits.as<float>(), s.c.vocab_size, s.last_rows, s.c.vocab_size, sel, s.st.get());
  } else {
    kc::gpu_sampling g{p.temperature, p.top_k, p.top_p, p.seed, counter};
    kc::sample_rows(s.logits.as<float>(), s.c.vocab_size, s.last_rows, s.c.vocab_size, g, sel, s.st.get());
  }
  kc::copy_to_host(out.data(), sel, std::size_t(s.last_rows) * 4, s.st.get());
  s.st.synchronize();
}

void cuda_forward::fill_random_kv(int slot, std::int64_t length, std::uint64_t seed) {
  auto& s = *impl_;
  s.check_slot(slot);
  if (length < 0 || length > s.opt.max_context)
    throw std::invalid_argument("cuda_forward::fill_random_kv: length " + std::to_string(length) +
                                " outside [0, " + std::to_string(s.opt.max_context) + "]");
  if (s.quant) {
    // Random codes (any bytes are codes), finite f16 scales and zeros, bf16
    // window rows: what the attention reads, without quantizing a context.
    const auto& sh = *s.shape;
    const std::int64_t nq = quantized_tokens(length, sh.layout.group, sh.flush_at);
    const std::int64_t nkv = s.c.num_key_value_heads;
    const auto o = s.offsets();
    for (int l = 0; l < int(s.c.num_hidden_layers); ++l) {
      std::uint8_t* base = s.layer_packed(l);
      const std::uint64_t sd = seed ^ (std::uint64_t(l * 4096 + slot) << 20);
      auto bytes = [&](std::size_t off, std::int64_t run, int k) {
        std::uint8_t* p = base + off + std::size_t(slot) * std::size_t(nkv * run);
        kc::fill_uniform_bf16(reinterpret_cast<std::uint16_t*>(p), nkv * run / 2, -1.f, 1.f, sd + std::uint64_t(k), s.st.get());
      };
      auto halves = [&](std::size_t off, std::int64_t run, float lo, float hi, int k) {
        auto* p = reinterpret_cast<std::uint16_t*>(base + off) + std::size_t(slot) * std::size_t(nkv * run);
        kc::fill_uniform_f16(p, nkv * run, lo, hi, sd + std::uint64_t(k), s.st.get());
      };
      bytes(o.kc, sh.k_run(), 1);
      bytes(o.vc, sh.v_run(), 2);
      if (sh.layout.planes() == 2) {
        bytes(o.kl, sh.k_run(), 3);
        bytes(o.vl, sh.v_run(), 4);
      }
      halves(o.ks, sh.ks_run(), 0.01f, 0.2f, 5);
      halves(o.kz, sh.ks_run(), -1.f, 0.f, 6);
      halves(o.vs, sh.vs_run(), 0.01f, 0.2f, 7);
      halves(o.vz, sh.vs_run(), -1.f, 0.f, 8);
      const std::size_t ring_run = std::size_t(sh.win_cap) * std::size_t(s.c.head_dim);
      kc::fill_uniform_bf16(s.ring_k(l) + std::size_t(slot) * std::size_t(nkv) * ring_run, std::int64_t(nkv) * std::int64_t(ring_run),
                            -1.f, 1.f, sd + 9, s.st.get());
      kc::fill_uniform_bf16(s.ring_v(l) + std::size_t(slot) * std::size_t(nkv) * ring_run, std::int64_t(nkv) * std::int64_t(ring_run),
                            -1.f, 1.f, sd + 10, s.st.get());
    }
    s.lengths[std::size_t(slot)] = length;
    s.quantized_len[std::size_t(slot)] = nq;
    s.st.synchronize();
    return;
  }
  const std::size_t run = std::size_t(s.opt.max_context) * std::size_t(s.c.head_dim);
  for (int l = 0; l < int(s.c.num_hidden_layers); ++l)
    for (int kv = 0; kv < 2; ++kv)
      for (std::int64_t h = 0; h < s.c.num_key_value_heads; ++h) {
        std::uint16_t* base = (kv ? s.v_cache(l) : s.k_cache(l)) +
                              (std::size_t(slot) * std::size_t(s.c.num_key_value_heads) + std::size_t(h)) * run;
        kc::fill_uniform_bf16(base, length * s.c.head_dim, -1.f, 1.f,
                              seed ^ (std::uint64_t(((l * 2 + kv) * 4096 + h) * 1024 + slot) << 20), s.st.get());
      }
  s.lengths[std::size_t(slot)] = length;
  s.st.synchronize();
}

void cuda_forward::synchronize() const { impl_->st.synchronize(); }
void* cuda_forward::stream() const { return impl_->st.get(); }

#endif

}  // namespace specpipe
