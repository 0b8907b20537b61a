// The forward pass of cuda_forward over its layers (see cuda_forward.cpp's
// header comment for the per-layer sequence): projections (bf16 GEMV/GEMM or
// the draft's 4-bit GEMV), attention (prefill, flash-decoding or packed),
// the MLP, and the logits.
#include "model/cuda_forward.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include <algorithm>

#include "model/cuda_forward_impl.hpp"

namespace specpipe {

kc::gemm_args cuda_forward::impl::gemm_args(const std::uint16_t* in, std::int64_t ldx, const std::uint16_t* wt,
                                            void* out, std::int64_t ldy, kc::gemm_out type, bool acc, std::int64_t m,
                                            std::int64_t n, std::int64_t k) const {
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

void cuda_forward::impl::gemm(const std::uint16_t* in, std::int64_t ldx, const std::uint16_t* wt, void* out,
                              std::int64_t ldy, kc::gemm_out type, bool acc, std::int64_t m, std::int64_t n,
                              std::int64_t k) {
  kc::gemm(blas.get(), gemm_args(in, ldx, wt, out, ldy, type, acc, m, n, k), st.get(), opt.gemm);
}

// A projection by the 16-bit weights `wt`, or by their 4-bit copy `wq`
// when the draft runs (the int4 GEMV, 8 rows per launch).
void cuda_forward::impl::proj(const std::uint16_t* in, std::int64_t ldx, const buffer& wt, const cuda_int4& wq,
                              void* out, std::int64_t ldy, kc::gemm_out type, bool acc, std::int64_t m, std::int64_t n,
                              std::int64_t k) {
  if (!draft) {
    gemm(in, ldx, wt.as<std::uint16_t>(), out, ldy, type, acc, m, n, k);
    return;
  }
  int4_proj(in, ldx, wq, out, ldy, type, acc, m, n, k);
}

bool cuda_forward::impl::norm_in_gemv() const {
  // Whole 128-column chunks and rows that fit the kernel's shared memory
  // (int4_gemv_args::norm); the gate/up and qkv weights share one group.
  const std::int64_t h = c.hidden_size;
  return draft && opt.fuse_norm && opt.int4_gemv_version == 7 && h % 128 == 0 && h <= kc::int4_gemv_max_norm_k &&
         !w.layers.empty() && w.layers[0].wqkv_q.group % 128 == 0;
}

void cuda_forward::impl::int4_proj(const std::uint16_t* in, std::int64_t ldx, const cuda_int4& wq, void* out,
                                   std::int64_t ldy, kc::gemm_out type, bool acc, std::int64_t m, std::int64_t n,
                                   std::int64_t k, const float* norm_weight, const kc::rope_append_args* rope) {
  const std::size_t out_size = type == kc::gemm_out::f32 ? 4 : 2;
  for (std::int64_t r = 0; r < m; r += kc::int4_gemv_max_rows) {
    kc::int4_gemv_args a;
    a.x = in + r * ldx;
    a.ldx = ldx;
    a.codes = wq.codes.as<std::uint8_t>();
    a.code_stride = wq.code_stride;
    a.scale = wq.scale.as<std::uint16_t>();  // null in tiles
    a.zero = wq.zero.as<std::uint16_t>();
    a.scale_zero = wq.scale_zero.as<std::uint16_t>();  // null in rows
    a.group = wq.group;
    a.y = static_cast<unsigned char*>(out) + std::size_t(r * ldy) * out_size;
    a.ldy = ldy;
    a.out = type;
    a.accumulate = acc;
    a.m = std::min<std::int64_t>(kc::int4_gemv_max_rows, m - r);
    a.n = n;
    a.k = k;
    a.dependent = opt.overlap_launch;
    a.version = opt.int4_gemv_version;
    a.pair_rows = wq.pair_rows;
    a.pair_head_dim = wq.pair_head_dim;
    kc::rope_append_args ra;
    if (rope) {  // this launch's rows' tokens
      ra = *rope;
      ra.slots += r;
      ra.positions += r;
      a.rope = &ra;
    }
    if (norm_weight) {  // the residual stream's rows r.. as the input, normalized in the GEMV
      a.norm.x = x.as<float>() + r * c.hidden_size;
      a.norm.ld = c.hidden_size;
      a.norm.weight = norm_weight;
      a.norm.eps = float(c.rms_norm_eps);
    }
    kc::int4_gemv(a, st.get());
  }
}

void cuda_forward::impl::mlp(const cuda_layer& L, std::int64_t m) {
  const std::int64_t h = c.hidden_size, inter = c.intermediate_size;
  auto fused = gemm_args(xn.as<std::uint16_t>(), h, L.wgu.as<std::uint16_t>(), act.data(), inter,
                         kc::gemm_out::swiglu, false, m, 2 * inter, h);
  auto plain = fused;
  plain.out = kc::gemm_out::bf16;
  if (!draft && opt.fuse_swiglu && kc::gemm_resolve(plain, opt.gemm) == kc::gemm_impl::gemv &&
      kc::gemv_supported(fused)) {
    kc::gemv(fused, st.get());
  } else if (draft && opt.fuse_swiglu && kc::int4_gemv_layout(opt.int4_gemv_version) == kc::int4_layout::tiles &&
             opt.int4_gemv_version != 9 && inter % 16 == 0) {
    // The draft's 4-bit gate/up GEMV with the SwiGLU as its epilogue (v7).
    int4_proj(xn.as<std::uint16_t>(), h, L.wgu_q, act.data(), inter, kc::gemm_out::swiglu, false, m, 2 * inter, h,
              norm_in_gemv() ? L.mlp_norm.as<float>() : nullptr);
  } else {
    if (norm_in_gemv())
      int4_proj(xn.as<std::uint16_t>(), h, L.wgu_q, gu.data(), 2 * inter, kc::gemm_out::bf16, false, m, 2 * inter, h,
                L.mlp_norm.as<float>());
    else
      proj(xn.as<std::uint16_t>(), h, L.wgu, L.wgu_q, gu.data(), 2 * inter, kc::gemm_out::bf16, false, m, 2 * inter,
           h);
    kc::swiglu(gu.as<std::uint16_t>(), 2 * inter, act.as<std::uint16_t>(), inter, m, inter, st.get(),
               opt.overlap_launch);
  }
  proj(act.as<std::uint16_t>(), inter, L.wdown, L.wdown_q, x.data(), h, kc::gemm_out::f32, true, m, h, inter);
}

// The layers for m rows whose tokens/slots/positions/lens (and, quantized,
// packed lengths and flushes) are on the device. prefill_slot >= 0: one
// sequence's chunk at pos0 (prefill attention over the bf16 cache, or the
// staging rows of a quantized cache, whose slot index is then 0), else m
// decode rows (flash-decoding, or the packed attention). Logits for the
// last `logit_rows` rows.
void cuda_forward::impl::layers(std::int64_t m, int prefill_slot, std::int64_t pos0, std::int64_t logit_rows) {
  const std::int64_t h = c.hidden_size, q = c.q_dim();
  const float eps = float(c.rms_norm_eps);
  const float scale = 1.f / std::sqrt(float(c.head_dim));
  const bool staged = quant && prefill_slot >= 0;
  kc::embedding(w.embed.as<std::uint16_t>(), c.vocab_size, h, dev_ints(0), m, x.as<float>(), h, st.get());
  // Every layer's oldest window groups, when due, before any layer appends:
  // one launch for the step (the groups are the same for every layer; the
  // kernel reads only rows of earlier steps, which no layer of this step
  // has overwritten yet), not one idle launch between each layer's qkv
  // GEMV and RoPE.
  if (quant && !staged) {
    auto qa = quantize_args(0, ring_source(0), dev_ints(1), dev_ints(5), dev_ints(6), int(m));
    qa.layers = int(w.layers.size());
    qa.src_layer = std::int64_t(2 * ring_elems());
    qa.dst_layer = std::int64_t(shape->layer_packed_bytes());
    qa.dependent = opt.overlap_launch;
    kc::quantize_groups(qa, st.get());
  }
  for (std::size_t li = 0; li < w.layers.size(); ++li) {
    const auto& L = w.layers[li];
    const int l = int(li);
    spec_mark(l, 0, st.get());  // SpeCache's timeline (no-op otherwise)
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
    ra.dependent = opt.overlap_launch;
    // The draft's qkv weight in pair order: RoPE and the append as the
    // GEMV's epilogue (cuda_forward_options::fuse_rope), one launch less.
    const bool rope_in_gemv = draft && opt.fuse_rope && L.wqkv_q.pair_rows > 0;
    const bool norm_fused = norm_in_gemv();  // the draft's qkv GEMV normalizes x itself
    if (!norm_fused)
      kc::rmsnorm(x.as<float>(), h, nullptr, 0, L.attn_norm.as<float>(), xn.as<std::uint16_t>(), h, m, h, eps,
                  st.get(), opt.overlap_launch);
    if (norm_fused || rope_in_gemv)  // the draft's 4-bit GEMV with its fused prologue or epilogue
      int4_proj(xn.as<std::uint16_t>(), h, L.wqkv_q, qkv.data(), qkv_dim(), kc::gemm_out::bf16, false, m, qkv_dim(), h,
                norm_fused ? L.attn_norm.as<float>() : nullptr, rope_in_gemv ? &ra : nullptr);
    else
      proj(xn.as<std::uint16_t>(), h, L.wqkv, L.wqkv_q, qkv.data(), qkv_dim(), kc::gemm_out::bf16, false, m, qkv_dim(),
           h);
    if (!rope_in_gemv) kc::rope_append(ra, st.get());
    if (store_entries > 0) spec_store(l);  // SpeCache: the new rows to the host store
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
    } else if (spec && spec->now != spec_phase::none) {
      spec_attention(l, m);
    } else if (quant) {
      auto pa = packed_args(l, m);
      pa.dependent = opt.overlap_launch;
      kc::packed_attention(pa, st.get());
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
      da.splits = kc::decode_attention_splits(int(m), int(c.num_key_value_heads), opt.max_context, props.sm_count,
                                              opt.max_splits, attention_blocks_per_sm);
      da.scale = scale;
      da.dependent = opt.overlap_launch;
      kc::decode_attention(da, st.get());
    }
    proj(attn.as<std::uint16_t>(), q, L.wo, L.wo_q, x.data(), h, kc::gemm_out::f32, true, m, h, q);
    if (!norm_in_gemv())  // else the gate/up GEMV normalizes x itself
      kc::rmsnorm(x.as<float>(), h, nullptr, 0, L.mlp_norm.as<float>(), xn.as<std::uint16_t>(), h, m, h, eps,
                  st.get(), opt.overlap_launch);
    mlp(L, m);
    spec_mark(l, 1, st.get());
  }
  if (logit_rows == 0) return;  // an inner prefill chunk: no logits
  const std::int64_t first = m - logit_rows;
  kc::rmsnorm(x.as<float>() + first * h, h, nullptr, 0, w.final_norm.as<float>(), xn.as<std::uint16_t>(), h, logit_rows,
              h, eps, st.get());
  if (draft && w.lm_head_q.out != 0)  // the draft's own 4-bit lm_head (make_draft with lm_head)
    int4_proj(xn.as<std::uint16_t>(), h, w.lm_head_q, logits.data(), c.vocab_size, kc::gemm_out::f32, false,
              logit_rows, c.vocab_size, h);
  else
    gemm(xn.as<std::uint16_t>(), h, w.lm_head_ptr(), logits.data(), c.vocab_size, kc::gemm_out::f32, false,
         logit_rows, c.vocab_size, h);
  last_rows = logit_rows;
  // SpeCache: the last layers' fetches overlap the final norm and lm_head;
  // the step ends when they are done (a graph must join its streams).
  if (spec && (spec->now == spec_phase::predecode || spec->now == spec_phase::speculative)) spec_join();
}

}  // namespace specpipe

#endif
