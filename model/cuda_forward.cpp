// cuda_forward: the Llama decode/prefill pass on the GPU (see cuda_forward.hpp).
//
// Per layer, for m rows (decode batch or prefill chunk):
//   xn = rmsnorm(x) ; qkv = xn Wqkv^T ; RoPE(q, k) + append k, v to the cache ;
//   a = attention(q, cache) ; x += a Wo^T (fused into the GEMM epilogue) ;
//   xn = rmsnorm(x) ; gu = xn Wgu^T ; h = silu(g) * u ; x += h Wdown^T
// then logits = rmsnorm(x) lm_head^T. x is the f32 residual stream.
#include "model/cuda_forward.hpp"

#include <stdexcept>
#include <string>

#ifdef SPECPIPE_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/sampling.hpp"
#include "model/cuda_model_impl.hpp"
#endif

namespace specpipe {

std::size_t cuda_forward::kv_bytes_per_token(const model_config& c) {
  return std::size_t(c.num_hidden_layers) * 2 * std::size_t(c.kv_dim()) * 2;
}

namespace {
std::int64_t scratch_rows(const cuda_forward_options& o) {
  return std::max<std::int64_t>(o.max_batch, o.prefill_chunk);
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

std::size_t cuda_forward::device_bytes(const model_config& c, const cuda_forward_options& o) {
  const std::size_t r = std::size_t(scratch_rows(o));
  const std::size_t kv = kv_bytes_per_token(c) * std::size_t(o.max_batch) * std::size_t(o.max_context);
  const std::size_t act = r * (4 * std::size_t(c.hidden_size) + 2 * std::size_t(c.hidden_size) +
                               2 * std::size_t(c.q_dim() + 2 * c.kv_dim()) + 2 * std::size_t(c.q_dim()) +
                               2 * 3 * std::size_t(c.intermediate_size) + 4 * 4);
  const std::size_t logits = std::size_t(o.max_batch) * std::size_t(c.vocab_size) * 4;
  const std::size_t partial = std::size_t(o.max_batch) * std::size_t(c.num_attention_heads) *
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
void cuda_forward::truncate(int, std::int64_t) {}
void cuda_forward::prefill(int, std::span<const std::int32_t>, std::span<float>) {}
void cuda_forward::decode(std::span<const int>, std::span<const std::int32_t>, std::span<float>) {}
void cuda_forward::select(const sampling_params&, std::uint64_t, std::span<std::int32_t>) {}
void cuda_forward::fill_random_kv(int, std::int64_t, std::uint64_t) {}
void cuda_forward::synchronize() const {}
void* cuda_forward::stream() const { return nullptr; }

#else

namespace kc = kernels::cuda;

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
  buffer kv;              // [layer][k|v][slot][kv_head][capacity][head_dim] bf16
  buffer x, xn, qkv, attn, gu, act, logits, partial;
  buffer scores;     // prefill attention S and P (prefill_scratch_bytes(), may be empty)
  buffer ints_dev;   // int32 [4][rows]: tokens, slots, positions, lens
  buffer ints_host;  // pinned mirror
  buffer selected;   // int32 [max_batch]
  std::vector<std::int64_t> lengths;
  std::map<int, kc::graph> graphs;  // decode batch size -> captured step
  std::map<int, int> eager_runs;    // decode batch size -> eager steps so far
  std::int64_t last_rows = 0;       // logits rows of the last forward
  int attention_blocks_per_sm = 2;  // resident decode-attention blocks (occupancy)

  impl(const cuda_model::impl& m, const cuda_forward_options& o) : w(m), c(m.config), opt(o) {
    kc::set_device(m.device);
    props = kc::query_device(m.device);
    dev = make_device_allocator(m.device);
    pinned = make_pinned_allocator();
    rows = scratch_rows(opt);
    const std::size_t r = std::size_t(rows);
    kv = buffer(*dev, kv_bytes_per_token(c) * std::size_t(opt.max_batch) * std::size_t(opt.max_context));
    x = buffer(*dev, r * std::size_t(c.hidden_size) * 4);
    xn = buffer(*dev, r * std::size_t(c.hidden_size) * 2);
    qkv = buffer(*dev, r * std::size_t(qkv_dim()) * 2);
    attn = buffer(*dev, r * std::size_t(c.q_dim()) * 2);
    gu = buffer(*dev, r * std::size_t(2 * c.intermediate_size) * 2);
    act = buffer(*dev, r * std::size_t(c.intermediate_size) * 2);
    logits = buffer(*dev, std::size_t(opt.max_batch) * std::size_t(c.vocab_size) * 4);
    partial = buffer(*dev, kc::decode_attention_scratch_floats(opt.max_batch, int(c.num_attention_heads),
                                                               int(c.head_dim), opt.max_splits) * 4);
    if (const std::size_t sb = prefill_scratch_bytes(c, opt); sb > 0) scores = buffer(*dev, sb);
    ints_dev = buffer(*dev, 4 * r * 4);
    ints_host = buffer(*pinned, 4 * r * 4);
    selected = buffer(*dev, std::size_t(opt.max_batch) * 4);
    lengths.assign(std::size_t(opt.max_batch), 0);
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
  // x += silu(g) * u Wdown^T. With fuse_swiglu, where the GEMV runs it, the
  // SwiGLU is fused into its input load: one launch and one round trip of
  // `act` less per layer, but each warp recomputes silu(g) * u for all of k.
  void mlp_down(const cuda_layer& L, std::int64_t m) {
    const std::int64_t h = c.hidden_size, inter = c.intermediate_size;
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

  // The layers for m rows whose tokens/slots/positions/lens are on the
  // device. prefill_slot >= 0: one sequence's chunk at pos0 (prefill
  // attention), else m decode rows (flash-decoding). Logits for the last
  // `logit_rows` rows.
  void layers(std::int64_t m, int prefill_slot, std::int64_t pos0, std::int64_t logit_rows) {
    const std::int64_t h = c.hidden_size, q = c.q_dim(), inter = c.intermediate_size;
    const float eps = float(c.rms_norm_eps);
    const float scale = 1.f / std::sqrt(float(c.head_dim));
    kc::embedding(w.embed.as<std::uint16_t>(), c.vocab_size, h, dev_ints(0), m, x.as<float>(), h, st.get());
    for (std::size_t li = 0; li < w.layers.size(); ++li) {
      const auto& L = w.layers[li];
      const int l = int(li);
      kc::rmsnorm(x.as<float>(), h, nullptr, 0, L.attn_norm.as<float>(), xn.as<std::uint16_t>(), h, m, h, eps, st.get());
      gemm(xn.as<std::uint16_t>(), h, L.wqkv.as<std::uint16_t>(), qkv.data(), qkv_dim(), kc::gemm_out::bf16, false, m,
           qkv_dim(), h);
      kc::rope_append_args ra;
      ra.qkv = qkv.as<std::uint16_t>();
      ra.ld_qkv = qkv_dim();
      ra.k_cache = k_cache(l);
      ra.v_cache = v_cache(l);
      ra.capacity = opt.max_context;
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
        pa.k_cache = k_cache(l);
        pa.v_cache = v_cache(l);
        pa.capacity = opt.max_context;
        pa.slot = prefill_slot;
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
      gemm(attn.as<std::uint16_t>(), q, L.wo.as<std::uint16_t>(), x.data(), h, kc::gemm_out::f32, true, m, h, q);
      kc::rmsnorm(x.as<float>(), h, nullptr, 0, L.mlp_norm.as<float>(), xn.as<std::uint16_t>(), h, m, h, eps, st.get());
      gemm(xn.as<std::uint16_t>(), h, L.wgu.as<std::uint16_t>(), gu.data(), 2 * inter, kc::gemm_out::bf16, false, m,
           2 * inter, h);
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

  // One copy of the four int arrays; callers synchronize the stream before
  // rewriting the pinned mirror, so an earlier copy never sees new values.
  void upload_ints() {
    kc::copy_to_device(ints_dev.data(), ints_host.data(), std::size_t(4 * rows) * 4, st.get());
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
  impl_ = std::make_unique<impl>(model.get(), options);
}

cuda_forward::~cuda_forward() = default;

const model_config& cuda_forward::config() const { return impl_->c; }
const cuda_forward_options& cuda_forward::options() const { return impl_->opt; }

std::int64_t cuda_forward::length(int slot) const {
  impl_->check_slot(slot);
  return impl_->lengths[std::size_t(slot)];
}

void cuda_forward::truncate(int slot, std::int64_t n) {
  impl_->check_slot(slot);
  auto& len = impl_->lengths[std::size_t(slot)];
  if (n < 0) throw std::invalid_argument("cuda_forward::truncate: n must be >= 0");
  len = std::min(len, n);
}

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
  if (!logits.empty()) {
    kc::copy_to_host(logits.data(), s.logits.data(), std::size_t(s.c.vocab_size) * 4, s.st.get());
    s.st.synchronize();
  }
}

void cuda_forward::decode(std::span<const int> slots, std::span<const std::int32_t> tokens, std::span<float> logits) {
  auto& s = *impl_;
  const std::int64_t b = std::int64_t(slots.size());
  if (b < 1 || b > s.opt.max_batch || tokens.size() != slots.size())
    throw std::invalid_argument("cuda_forward::decode: " + std::to_string(slots.size()) + " slots and " +
                                std::to_string(tokens.size()) + " tokens; expected 1.." +
                                std::to_string(s.opt.max_batch) + " of each");
  std::vector<bool> seen(std::size_t(s.opt.max_batch), false);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    s.check_slot(slots[i]);
    if (seen[std::size_t(slots[i])])
      throw std::invalid_argument("cuda_forward::decode: slot " + std::to_string(slots[i]) + " listed twice");
    seen[std::size_t(slots[i])] = true;
    s.check_token(tokens[i], i);
    if (s.lengths[std::size_t(slots[i])] >= s.opt.max_context)
      throw std::invalid_argument("cuda_forward::decode: slot " + std::to_string(slots[i]) + " is full (" +
                                  std::to_string(s.opt.max_context) + " tokens)");
  }
  if (!logits.empty() && std::int64_t(logits.size()) < b * s.c.vocab_size)
    throw std::invalid_argument("cuda_forward::decode: logits must hold batch * vocab_size floats");
  s.st.synchronize();  // the pinned mirror may still feed the previous copy
  for (std::int64_t i = 0; i < b; ++i) {
    const std::int64_t pos = s.lengths[std::size_t(slots[std::size_t(i)])];
    s.host_ints(0)[i] = tokens[std::size_t(i)];
    s.host_ints(1)[i] = slots[std::size_t(i)];
    s.host_ints(2)[i] = std::int32_t(pos);
    s.host_ints(3)[i] = std::int32_t(pos + 1);
  }
  s.upload_ints();
  const int key = int(b);
  auto g = s.graphs.find(key);
  if (g != s.graphs.end()) {
    g->second.launch(s.st.get());
    s.last_rows = b;
  } else if (!s.opt.use_graphs || s.eager_runs[key] < 1) {
    // The first step of each batch size runs eagerly: kernels configure
    // their shared-memory limits and cuBLAS picks its algorithms outside a
    // capture.
    s.layers(b, -1, 0, b);
    ++s.eager_runs[key];
  } else {
    kc::graph::begin_capture(s.st.get());
    try {
      s.layers(b, -1, 0, b);
    } catch (...) {
      try {
        kc::graph::end_capture(s.st.get());
      } catch (...) {
      }
      throw;
    }
    auto captured = kc::graph::end_capture(s.st.get());
    captured.launch(s.st.get());
    s.graphs.emplace(key, std::move(captured));
  }
  for (std::int64_t i = 0; i < b; ++i) ++s.lengths[std::size_t(slots[std::size_t(i)])];
  if (!logits.empty()) {
    kc::copy_to_host(logits.data(), s.logits.data(), std::size_t(b * s.c.vocab_size) * 4, s.st.get());
    s.st.synchronize();
  }
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
