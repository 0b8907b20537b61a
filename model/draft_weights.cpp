#include "model/draft_weights.hpp"

#include <cstdio>
#include <stdexcept>

namespace specpipe {
namespace {

namespace kc = kernels::cpu;

// (out, in) of every projection of one layer, in weight_set order.
std::vector<std::pair<std::int64_t, std::int64_t>> layer_shapes(const model_config& c) {
  const std::int64_t h = c.hidden_size, i = c.intermediate_size;
  return {{c.q_dim(), h}, {c.kv_dim(), h}, {c.kv_dim(), h}, {h, c.q_dim()}, {i, h}, {i, h}, {h, i}};
}

}  // namespace

draft_weights::draft_weights(const model_config& c, const model_weights& target, const draft_options& opts,
                             kc::thread_pool* pool)
    : opts_(opts) {
  if (opts.group <= 0 || opts.group % 2 != 0)
    throw std::invalid_argument("draft weights: group must be even and positive, got " + std::to_string(opts.group));
  if (std::int64_t(target.layers.size()) != c.num_hidden_layers)
    throw std::invalid_argument("draft weights: the target holds " + std::to_string(target.layers.size()) +
                                " layers, config says " + std::to_string(c.num_hidden_layers));
  // Reserved up front: the set's views point into these vectors.
  packed_.reserve(target.layers.size() * 7 + 1);
  auto pack = [&](const tensor_view& t, const std::string& name) {
    if (t.empty() || t.rank != 2 || t.strides[1] != 1)
      throw std::invalid_argument("draft weights: " + name + " is not a 2-D tensor with unit inner stride");
    packed_.push_back(kc::quantize_int4(t.data, t.type, t.shape[0], t.shape[1], t.strides[0], opts.group, pool));
    linear_weight w;
    w.int4 = packed_.back().view();
    return w;
  };
  for (std::size_t i = 0; i < target.layers.size(); ++i) {
    const layer_weights& l = target.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    layer_linears d;
    d.wq = pack(l.wq, p + "self_attn.q_proj.weight");
    d.wk = pack(l.wk, p + "self_attn.k_proj.weight");
    d.wv = pack(l.wv, p + "self_attn.v_proj.weight");
    d.wo = pack(l.wo, p + "self_attn.o_proj.weight");
    d.w_gate = pack(l.w_gate, p + "mlp.gate_proj.weight");
    d.w_up = pack(l.w_up, p + "mlp.up_proj.weight");
    d.w_down = pack(l.w_down, p + "mlp.down_proj.weight");
    set_.layers.push_back(d);
  }
  if (opts.quantize_lm_head)
    set_.lm_head = pack(target.lm_head, "lm_head.weight");
  else
    set_.lm_head.dense = target.lm_head;
}

std::size_t draft_weights::bytes() const {
  std::size_t b = 0;
  for (const auto& p : packed_) b += p.bytes();
  return b;
}

std::size_t draft_bytes(const model_config& c, const draft_options& opts) {
  std::size_t b = 0;
  for (const auto& [out, in] : layer_shapes(c)) b += kc::int4_bytes(out, in, opts.group);
  b *= std::size_t(c.num_hidden_layers);
  if (opts.quantize_lm_head) b += kc::int4_bytes(c.vocab_size, c.hidden_size, opts.group);
  return b;
}

std::size_t weight_bytes_16bit(const model_config& c) {
  std::size_t params = std::size_t(c.vocab_size * c.hidden_size) * (c.tie_word_embeddings ? 1 : 2);
  params += std::size_t(c.hidden_size);  // final norm
  std::size_t layer = 2 * std::size_t(c.hidden_size);
  for (const auto& [out, in] : layer_shapes(c)) layer += std::size_t(out * in);
  return 2 * (params + layer * std::size_t(c.num_hidden_layers));
}

double draft_cost_estimate(const model_config& c, const draft_options& opts) {
  std::size_t projections = 0;
  for (const auto& [out, in] : layer_shapes(c)) projections += std::size_t(out * in);
  projections *= std::size_t(c.num_hidden_layers);
  const double lm_head = 2.0 * double(c.vocab_size * c.hidden_size);
  draft_options no_head = opts;
  no_head.quantize_lm_head = false;
  const double head = opts.quantize_lm_head ? double(kc::int4_bytes(c.vocab_size, c.hidden_size, opts.group)) : lm_head;
  const double draft = double(draft_bytes(c, no_head)) + head;
  return draft / (2.0 * double(projections) + lm_head);
}

std::string describe_draft_memory(const model_config& c, const draft_options& opts) {
  const double extra = double(draft_bytes(c, opts)), base = double(weight_bytes_16bit(c));
  char buf[200];
  std::snprintf(buf, sizeof buf, "draft: 4-bit g%lld projections, +%.2f MiB over %.2f MiB of 16-bit weights (+%.1f%%); "
                "lm_head %s",
                static_cast<long long>(opts.group), extra / (1 << 20), base / (1 << 20), 100.0 * extra / base,
                opts.quantize_lm_head ? "4-bit too" : "shared");
  return buf;
}

}  // namespace specpipe
