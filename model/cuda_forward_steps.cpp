// cuda_forward's steps: decode and extend (n rows per slot, graph-captured
// per shape) and the prefills (straight into the window ring, or through the
// staging area), with the quantized cache's flush bookkeeping on the host.
#include "model/cuda_forward.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/cuda_forward_impl.hpp"

namespace specpipe {

// One copy of the int arrays; callers synchronize the stream before
// rewriting the pinned mirror, so an earlier copy never sees new values.
void cuda_forward::impl::upload_ints() {
  kc::copy_to_device(ints_dev.data(), ints_host.data(), std::size_t(int_arrays * rows) * 4, st.get());
}

void cuda_forward::impl::upload_aux() { kc::copy_to_device(aux_dev.data(), aux_host.data(), 8 * 4, st.get()); }

// The quantized-cache fields of row i: packed length after this forward's
// flush, and the flush (first group, count; count 0 on all but the first
// row of a slot).
void cuda_forward::impl::set_quant_row(std::int64_t i, std::int64_t quant_after, std::int64_t first_group,
                                       std::int64_t groups) {
  host_ints(4)[i] = std::int32_t(quant_after);
  host_ints(5)[i] = std::int32_t(first_group);
  host_ints(6)[i] = std::int32_t(groups);
}

void cuda_forward::impl::check_slots(const char* who, std::span<const int> slots, std::int64_t rows) const {
  const auto name = [who] { return std::string("cuda_forward::") + who; };
  if (slots.empty() || std::int64_t(slots.size()) > opt.max_batch)
    throw std::invalid_argument(name() + ": " + std::to_string(slots.size()) + " slots; expected 1.." +
                                std::to_string(opt.max_batch));
  std::fill(slot_seen.begin(), slot_seen.end(), std::uint8_t(0));
  for (const int slot : slots) {
    check_slot(slot);
    if (slot_seen[std::size_t(slot)])
      throw std::invalid_argument(name() + ": slot " + std::to_string(slot) + " listed twice");
    slot_seen[std::size_t(slot)] = 1;
    if (lengths[std::size_t(slot)] + rows > opt.max_context)
      throw std::invalid_argument(name() + ": slot " + std::to_string(slot) + " holds " +
                                  std::to_string(lengths[std::size_t(slot)]) + " of " +
                                  std::to_string(opt.max_context) + " tokens; " + std::to_string(rows) +
                                  " more do not fit");
  }
}

std::int64_t cuda_forward::impl::flush_before(const char* who, std::size_t slot, std::int64_t rows) const {
  const std::int64_t G = shape->layout.group, window = lengths[slot] - quantized_len[slot];
  const std::int64_t f = groups_due(window, shape->flush_at, G);
  if (f > 1 || window - f * G + rows > shape->win_cap)
    throw std::logic_error(std::string("cuda_forward::") + who + ": slot " + std::to_string(slot) +
                           " holds a window of " + std::to_string(window) +
                           " tokens, more than one flush can make room for");
  return f;
}

// Rows of one slot appended straight into the ring (a short prefill):
// the flush due first, then n decode-style rows, logits of the last.
void cuda_forward::impl::prefill_rows(int slot, std::span<const std::int32_t> tokens) {
  const std::int64_t n = std::int64_t(tokens.size());
  auto& len = lengths[std::size_t(slot)];
  auto& nq = quantized_len[std::size_t(slot)];
  const std::int64_t G = shape->layout.group;
  const std::int64_t f = groups_due(len - nq, shape->flush_at, G);
  st.synchronize();  // the pinned mirror may still feed the previous copy
  for (std::int64_t i = 0; i < n; ++i) {
    set_row(i, tokens[std::size_t(i)], slot, len + i);
    set_quant_row(i, nq + f * G, nq / G, i == 0 ? f : 0);
  }
  host_ints(store_slot)[0] = slot;
  host_ints(store_first)[0] = std::int32_t(len);
  host_ints(store_count)[0] = std::int32_t(n);
  upload_ints();
  store_entries = spec ? 1 : 0;
  store_max_rows = int(n);
  layers(n, -1, 0, 1);
  store_entries = 0;
  len += n;
  nq += f * G;
}

// A prefill through the staging rows (see the file comment).
void cuda_forward::impl::prefill_staged(int slot, std::span<const std::int32_t> tokens) {
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
    auto qa = quantize_args(0, from_staging ? staging_source(0) : ring_source(0), aux(0), aux(1), aux(2), 1);
    qa.max_groups = int(groups);
    qa.layers = L;  // every layer in one launch
    qa.src_layer = std::int64_t(2 * (from_staging ? staging_elems() : ring_elems()));
    qa.dst_layer = std::int64_t(shape->layer_packed_bytes());
    kc::quantize_groups(qa, st.get());
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
    for (std::int64_t i = 0; i < m; ++i)
      set_row(i, tokens[off + std::size_t(i)], 0, len + i);  // the staging rows are slot 0 of their own
    host_ints(store_slot)[0] = slot;  // the host store takes the slot's own index
    host_ints(store_first)[0] = std::int32_t(len);
    host_ints(store_count)[0] = std::int32_t(m);
    upload_ints();
    const bool last = off + std::size_t(m) == tokens.size();
    store_entries = spec ? 1 : 0;
    store_max_rows = int(m);
    store_staged = true;
    try {
      layers(m, slot, len, last ? 1 : 0);
    } catch (...) {
      store_entries = 0;
      store_staged = false;
      throw;
    }
    store_entries = 0;
    store_staged = false;
    len += m;
  }
  // 4. The groups the CPU would flush at the next append, then the rest of
  //    the window back into the ring.
  const std::int64_t f2 = groups_due(len - nq, s.flush_at, G);
  flush(nq / G, f2, true);
  nq += f2 * G;
  move_rows(nq, len - nq, false);
}

// Runs layers(m) for a step of shape `key`: the captured graph, or eagerly
// (the first time, or without graphs), or captures it (the second time).
void cuda_forward::impl::run_step(const step_key& key, std::int64_t m) {
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
      } catch (...) {}
      throw;
    }
    auto captured = kc::graph::end_capture(st.get());
    captured.launch(st.get());
    graphs.emplace(key, std::move(captured));
  }
}

// decode() (n = 1) and extend(): n rows per slot, every row's logits.
void cuda_forward::impl::step(const char* who, std::span<const int> slots, std::int64_t n,
                              std::span<const std::int32_t> tokens, std::span<float> out_logits) {
  // Built only for an error message: nothing is allocated on a good step's path.
  const auto name = [who] { return std::string("cuda_forward::") + who; };
  const std::int64_t b = std::int64_t(slots.size());
  const std::int64_t n_cap =
      quant ? std::min<std::int64_t>(opt.max_step_tokens, shape->max_append) : opt.max_step_tokens;
  if (n < 1 || (n > 1 && n > n_cap))
    throw std::invalid_argument(name() + ": " + std::to_string(n) + " tokens per slot; at most " +
                                std::to_string(std::max<std::int64_t>(1, n_cap)) + " (max_step_tokens" +
                                (quant ? ", kv_max_append)" : ")"));
  if (std::int64_t(tokens.size()) != b * n)
    throw std::invalid_argument(name() + ": " + std::to_string(tokens.size()) + " tokens for " + std::to_string(b) +
                                " slots of " + std::to_string(n) + " rows");
  if (draft && !w.draft_group) throw std::logic_error(name() + ": the model has no draft weights");
  check_slots(who, slots, n);
  for (std::size_t i = 0; i < tokens.size(); ++i) check_token(tokens[i], i);
  const std::int64_t m = b * n;
  if (!out_logits.empty() && std::int64_t(out_logits.size()) < m * c.vocab_size)
    throw std::invalid_argument(name() + ": logits must hold " + std::to_string(m) + " * vocab_size floats");
  // Multi-query attention blocks: each slot's rows in runs of as many as
  // share a block's query columns.
  const int gq = int(c.num_attention_heads / c.num_key_value_heads);
  const std::int64_t per_block = quant && n > 1 ? std::min<std::int64_t>(n, kc::packed_attention_max_queries(gq)) : 1;
  st.synchronize();  // the pinned mirror may still feed the previous copy
  int blocks = 0;
  for (std::int64_t i = 0; i < b; ++i) {
    const std::size_t slot = std::size_t(slots[std::size_t(i)]);
    const std::int64_t pos = lengths[slot];
    std::int64_t f = 0, nq = 0;
    if (quant) {
      nq = quantized_len[slot];
      f = flush_before(who, slot, n);
    }
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t r = i * n + j;
      set_row(r, tokens[std::size_t(r)], int(slot), pos + j);
      if (quant) set_quant_row(r, nq + f * shape->layout.group, nq / shape->layout.group, j == 0 ? f : 0);
    }
    if (per_block > 1)
      for (std::int64_t j = 0; j < n; j += per_block, ++blocks) {
        host_ints(7)[blocks] = std::int32_t(i * n + j);
        host_ints(8)[blocks] = std::int32_t(std::min(per_block, n - j));
      }
    if (quant) quantized_len[slot] = nq + f * shape->layout.group;
    if (spec) {  // SpeCache's host store keeps every appended row
      host_ints(store_slot)[i] = std::int32_t(slot);
      host_ints(store_first)[i] = std::int32_t(pos);
      host_ints(store_count)[i] = std::int32_t(n);
    }
  }
  upload_ints();
  store_entries = spec ? int(b) : 0;
  store_max_rows = int(n);
  step_blocks = blocks;
  step_max_queries = int(per_block);
  struct reset {
    impl& s;
    ~reset() {
      s.step_blocks = 0;
      s.step_max_queries = 1;
      s.store_entries = 0;
    }
  } reset_after{*this};
  run_step(step_key{int(b), int(n), quant ? read_bits : 0, draft, 0}, m);
  for (std::int64_t i = 0; i < b; ++i) lengths[std::size_t(slots[std::size_t(i)])] += n;
  if (!out_logits.empty()) {
    kc::copy_to_host(out_logits.data(), logits.data(), std::size_t(m * c.vocab_size) * 4, st.get());
    st.synchronize();
  }
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
      for (std::int64_t i = 0; i < n; ++i) s.set_row(i, tokens[off + std::size_t(i)], slot, len + i);
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

}  // namespace specpipe

#endif
