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
// append, as model/quantized_cache.hpp; every layer's in one launch at the
// start of the step), then RoPE + append into the window ring; attention is the packed attention over codes + window. A prefill
// longer than the ring attends in full precision through the staging area
// (bf16 rows of the whole context: the packed part dequantized, the window
// copied, the prompt appended), then quantizes the groups due and moves the
// rest of the window back to the ring.
//
// Files: the device state and its argument helpers in cuda_forward_impl.hpp;
// the pass over the layers in cuda_forward_layers.cpp; decode/extend steps
// and the prefills in cuda_forward_steps.cpp; here the sizes, construction
// and the small public methods.
#include "model/cuda_forward.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda/topk.hpp"
#include "model/cuda_packed_kv.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "model/cuda_forward_impl.hpp"
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
// Rows of the largest multi-token step (decode: max_batch; SpeCache's steps:
// two per slot, the real and the speculative token).
std::int64_t step_rows(const cuda_forward_options& o) {
  return o.max_batch * std::max<std::int64_t>(o.specache_fetch ? 2 : 1, o.max_step_tokens);
}
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
  return kv + act + logits + partial + prefill_scratch_bytes(c, o) + specache_device_bytes(c, o) +
         (std::size_t(32) << 20) /* cuBLAS workspace */;
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
void cuda_forward::specache_predecode(std::span<const int>, std::span<const std::int32_t>, std::span<float>) {}
void cuda_forward::specache_step(std::span<const int>, std::span<const std::int32_t>, std::span<const std::int32_t>,
                                 std::span<float>) {}
void cuda_forward::specache_output_step(std::span<const int>, std::span<const std::int32_t>, std::span<float>) {}
std::size_t cuda_forward::specache_host_bytes() const { return 0; }
void cuda_forward::specache_set_fetch(bool) {}
void cuda_forward::specache_set_timeline(bool) {}
std::pair<std::int64_t, std::int64_t> cuda_forward::specache_hits() const { return {0, 0}; }
std::vector<cuda_forward::gpu_span> cuda_forward::specache_timeline() const { return {}; }
void cuda_forward::specache_plan_and_fetch() {}
std::int64_t cuda_forward::specache_rows_fetched() const { return 0; }
bool cuda_forward::packed_lane_order() const { return false; }
bool cuda_forward::specache_shared_blocks() const { return false; }
void cuda_forward::select(const sampling_params&, std::uint64_t, std::span<std::int32_t>, std::int64_t, std::int64_t) {}
void cuda_forward::fill_random_kv(int, std::int64_t, std::uint64_t) {}
void cuda_forward::synchronize() const {}
void cuda_forward::bind_thread() const {}
void* cuda_forward::stream() const { return nullptr; }

#else

cuda_forward::impl::impl(const cuda_model::impl& m, const cuda_forward_options& o) : w(m), c(m.config), opt(o) {
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
  slot_seen.assign(std::size_t(opt.max_batch), 0);
  if (opt.specache_fetch) spec_init();
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


cuda_forward::cuda_forward(const cuda_model& model, const cuda_forward_options& options) {
  if (options.max_batch < 1 || options.max_context < 1 || options.prefill_chunk < 1 || options.max_splits < 1)
    throw std::invalid_argument("cuda_forward: max_batch, max_context, prefill_chunk and max_splits must be >= 1");
  if (options.gemv_unroll != 2 && options.gemv_unroll != 4)
    throw std::invalid_argument("cuda_forward: gemv_unroll must be 2 or 4, got " +
                                std::to_string(options.gemv_unroll));
  if (options.packed_stages != 0 && (options.packed_stages < 2 || options.packed_stages > 4))
    throw std::invalid_argument("cuda_forward: packed_stages must be 0 (per format), 2, 3 or 4, got " +
                                std::to_string(options.packed_stages));
  if (options.packed_blocks != 0 && options.packed_blocks != 3 && options.packed_blocks != 4)
    throw std::invalid_argument("cuda_forward: packed_blocks must be 0 (the default), 3 or 4, got " +
                                std::to_string(options.packed_blocks));
  if (options.specache_fetch) {
    if (options.kv.format != kv_format::specache)
      throw std::invalid_argument("cuda_forward: specache_fetch needs the specache KV format, not " +
                                  options.kv.describe());
    if (options.kv.topk < 1 || options.kv.topk > kernels::cuda::topk_max_k)
      throw std::invalid_argument("cuda_forward: specache's top-k must be in [1, " +
                                  std::to_string(kernels::cuda::topk_max_k) + "], got " +
                                  std::to_string(options.kv.topk));
    if (options.kv_max_append < 2)
      throw std::invalid_argument("cuda_forward: specache steps append two rows (the speculative one); "
                                  "kv_max_append must be >= 2");
    if (options.specache_store_tokens == 0 || options.specache_store_tokens < -1)
      throw std::invalid_argument("cuda_forward: specache_store_tokens must be -1 (max_context) or >= 1");
  }
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
      if (impl_->spec) impl_->spec->seeded[std::size_t(slot)] = false;
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
  const int version = impl_->opt.int4_gemv_version;
  if (draft && kc::int4_gemv_layout(version) != impl_->w.draft_layout) {
    const auto name = [](kc::int4_layout l) { return l == kc::int4_layout::tiles ? "tiles" : "rows"; };
    const std::string v = std::to_string(version);
    throw std::logic_error("cuda_forward::set_draft_weights: int4 GEMV version " + v + " reads " +
                           name(kc::int4_gemv_layout(version)) + " but the draft was made in " +
                           name(impl_->w.draft_layout) + "; make it with cuda_model::make_draft(group, "
                           "kernels::cuda::int4_gemv_layout(" + v + "))");
  }
  impl_->draft = draft;
}

bool cuda_forward::draft_weights() const { return impl_->draft; }
bool cuda_forward::packed_lane_order() const {
  return impl_->shape && impl_->packed_order() == kc::packed_order::lane;
}
bool cuda_forward::specache_shared_blocks() const { return impl_->shape && impl_->specache_shares_blocks(); }

void cuda_forward::select(const sampling_params& p, std::uint64_t counter, std::span<std::int32_t> out,
                          std::int64_t first_row, std::int64_t rows) {
  auto& s = *impl_;
  if (s.last_rows < 1) throw std::logic_error("cuda_forward::select: no forward has run");
  if (rows < 0) rows = s.last_rows - first_row;
  if (first_row < 0 || rows < 1 || first_row + rows > s.last_rows)
    throw std::invalid_argument("cuda_forward::select: rows [" + std::to_string(first_row) + ", +" +
                                std::to_string(rows) + ") outside the last forward's " +
                                std::to_string(s.last_rows));
  if (std::int64_t(out.size()) < rows)
    throw std::invalid_argument("cuda_forward::select: out must hold " + std::to_string(rows) + " ids");
  // sample_rows checks temperature, top_k and top_p itself.
  auto* sel = s.selected.as<std::int32_t>();
  const float* logits = s.logits.as<float>() + first_row * s.c.vocab_size;
  if (p.temperature <= 0.f) {
    kc::argmax_rows(logits, s.c.vocab_size, rows, s.c.vocab_size, sel, s.st.get());
  } else {
    kc::gpu_sampling g{p.temperature, p.top_k, p.top_p, p.seed, counter};
    kc::sample_rows(logits, s.c.vocab_size, rows, s.c.vocab_size, g, sel, s.st.get());
  }
  kc::copy_to_host(out.data(), sel, std::size_t(rows) * 4, s.st.get());
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
    if (s.spec) {  // the host store's rows of the slot, random as well (written over the link)
      const std::size_t run = std::size_t(s.spec->store_tokens) * std::size_t(2 * s.c.head_dim);
      for (int l = 0; l < int(s.c.num_hidden_layers); ++l)
        kc::fill_uniform_bf16(s.store_layer(l) + std::size_t(slot) * std::size_t(nkv) * run,
                              std::int64_t(nkv) * std::int64_t(run), -1.f, 1.f,
                              seed ^ (std::uint64_t(l * 4096 + slot) << 20) ^ 11u, s.st.get());
      s.spec->seeded[std::size_t(slot)] = false;
    }
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
void cuda_forward::bind_thread() const { kc::set_device(impl_->w.device); }
void* cuda_forward::stream() const { return impl_->st.get(); }

#endif

}  // namespace specpipe
