#include "model/forward.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/activation.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/embedding.hpp"
#include "kernels/int4_linear.hpp"
#include "kernels/linear.hpp"
#include "kernels/norm.hpp"
#include "kernels/rope.hpp"

namespace specpipe {

namespace kc = kernels::cpu;

struct cpu_forward::scratch {
  std::int64_t tokens = 0;  // capacity in tokens
  std::vector<float> hidden;    // [n, hidden] residual stream
  std::vector<float> normed;    // [n, hidden] input of the next projection
  std::vector<float> delta;     // [n, hidden] sub-layer output added to the residual
  std::vector<float> q;         // [n, q_dim]
  std::vector<float> k;         // [n, kv_dim]
  std::vector<float> v;         // [n, kv_dim]
  std::vector<float> attn;      // [n, q_dim]
  std::vector<float> gate;      // [n, intermediate]
  std::vector<float> up;        // [n, intermediate]
  std::vector<float> cos_t;     // [n, head_dim / 2]
  std::vector<float> sin_t;     // [n, head_dim / 2]
  std::vector<std::int64_t> positions;

  // Grows only when a batch is larger than any before, so steady decoding
  // allocates nothing.
  void ensure(const model_config& c, std::int64_t n) {
    if (n <= tokens) return;
    const auto sz = [n](std::int64_t per_token) { return std::size_t(n * per_token); };
    hidden.resize(sz(c.hidden_size));
    normed.resize(sz(c.hidden_size));
    delta.resize(sz(c.hidden_size));
    q.resize(sz(c.q_dim()));
    k.resize(sz(c.kv_dim()));
    v.resize(sz(c.kv_dim()));
    attn.resize(sz(c.q_dim()));
    gate.resize(sz(c.intermediate_size));
    up.resize(sz(c.intermediate_size));
    cos_t.resize(sz(c.head_dim / 2));
    sin_t.resize(sz(c.head_dim / 2));
    positions.resize(std::size_t(n));
    tokens = n;
  }
};

namespace {

void check_tensor(const tensor_view& t, const std::string& name, std::int64_t d0, std::int64_t d1) {
  const bool is_float = t.type == dtype::f32 || t.type == dtype::f16 || t.type == dtype::bf16;
  const bool vector = d1 < 0;
  std::string expected = "[";
  expected += std::to_string(d0);
  if (!vector) expected.append(", ").append(std::to_string(d1));
  expected += ']';
  if (t.empty() || !is_float || t.where != memory_kind::host || t.rank != (vector ? 1 : 2) ||
      t.shape[0] != d0 || (!vector && t.shape[1] != d1) || t.strides[t.rank - 1] != 1 ||
      (!vector && t.strides[0] < d1))
    throw std::invalid_argument("cpu_forward: tensor " + name + " should be a host f32/f16/bf16 " +
                                expected + " with unit inner stride, found " +
                                (t.empty() ? std::string("no data") : t.describe()));
}

void check_weights(const model_config& c, const model_weights& w) {
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.intermediate_size <= 0 ||
      c.num_hidden_layers <= 0 || c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 ||
      c.head_dim <= 0 || c.head_dim % 2 != 0 || c.num_attention_heads % c.num_key_value_heads != 0)
    throw std::invalid_argument(
        "cpu_forward: config sizes must be positive, head_dim even and num_attention_heads a "
        "multiple of num_key_value_heads");
  if (std::int64_t(w.layers.size()) != c.num_hidden_layers)
    throw std::invalid_argument("cpu_forward: weights hold " + std::to_string(w.layers.size()) +
                                " layers, config says " + std::to_string(c.num_hidden_layers));
  const std::int64_t h = c.hidden_size;
  check_tensor(w.embed, "model.embed_tokens.weight", c.vocab_size, h);
  check_tensor(w.final_norm, "model.norm.weight", h, -1);
  check_tensor(w.lm_head, "lm_head.weight", c.vocab_size, h);
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    const auto& l = w.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    check_tensor(l.attn_norm, p + "input_layernorm.weight", h, -1);
    check_tensor(l.wq, p + "self_attn.q_proj.weight", c.q_dim(), h);
    check_tensor(l.wk, p + "self_attn.k_proj.weight", c.kv_dim(), h);
    check_tensor(l.wv, p + "self_attn.v_proj.weight", c.kv_dim(), h);
    check_tensor(l.wo, p + "self_attn.o_proj.weight", h, c.q_dim());
    check_tensor(l.mlp_norm, p + "post_attention_layernorm.weight", h, -1);
    check_tensor(l.w_gate, p + "mlp.gate_proj.weight", c.intermediate_size, h);
    check_tensor(l.w_up, p + "mlp.up_proj.weight", c.intermediate_size, h);
    check_tensor(l.w_down, p + "mlp.down_proj.weight", h, c.intermediate_size);
  }
}

// A replacement projection must have the checkpoint's shape; a packed one
// must be a well-formed host matrix (the kernel checks the rest).
void check_linear(const linear_weight& w, const std::string& name, std::int64_t out, std::int64_t in) {
  if (!w.is_int4()) {
    check_tensor(w.dense, name, out, in);
    return;
  }
  if (w.int4.out != out || w.int4.in != in || !w.int4.scale || !w.int4.zero)
    throw std::invalid_argument("cpu_forward: packed 4-bit " + name + " should be [" + std::to_string(out) + ", " +
                                std::to_string(in) + "] with scales and zeros, found [" +
                                std::to_string(w.int4.out) + ", " + std::to_string(w.int4.in) + "]");
}

void check_weight_set(const model_config& c, const weight_set& s) {
  if (std::int64_t(s.layers.size()) != c.num_hidden_layers)
    throw std::invalid_argument("cpu_forward: the weight set holds " + std::to_string(s.layers.size()) +
                                " layers, config says " + std::to_string(c.num_hidden_layers));
  const std::int64_t h = c.hidden_size, inter = c.intermediate_size;
  check_linear(s.lm_head, "lm_head.weight", c.vocab_size, h);
  for (std::size_t i = 0; i < s.layers.size(); ++i) {
    const auto& l = s.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    check_linear(l.wq, p + "self_attn.q_proj.weight", c.q_dim(), h);
    check_linear(l.wk, p + "self_attn.k_proj.weight", c.kv_dim(), h);
    check_linear(l.wv, p + "self_attn.v_proj.weight", c.kv_dim(), h);
    check_linear(l.wo, p + "self_attn.o_proj.weight", h, c.q_dim());
    check_linear(l.w_gate, p + "mlp.gate_proj.weight", inter, h);
    check_linear(l.w_up, p + "mlp.up_proj.weight", inter, h);
    check_linear(l.w_down, p + "mlp.down_proj.weight", h, inter);
  }
}

void project(const float* x, std::int64_t n, const linear_weight& lw, float* y, kc::thread_pool& pool) {
  if (lw.is_int4()) {
    kc::int4_linear_args a;
    a.x = x;
    a.w = lw.int4;
    a.y = y;
    a.n = n;
    kc::int4_linear(a, &pool);
    return;
  }
  const tensor_view& w = lw.dense;
  kc::linear_args a;
  a.x = x;
  a.w = w.data;
  a.w_type = w.type;
  a.w_stride = w.strides[0];
  a.y = y;
  a.n = n;
  a.in = w.shape[1];
  a.out = w.shape[0];
  kc::linear(a, &pool);
}

}  // namespace

cpu_forward::cpu_forward(const model_config& config, const model_weights& weights, int threads)
    : config_(config), weights_(weights), scratch_(std::make_unique<scratch>()) {
  check_weights(config_, weights_);
  target_ = dense_weight_set(weights_);
  inv_freq_ = rope_inv_freq(config_);
  pool_ = std::make_unique<kc::thread_pool>(threads);
}

cpu_forward::~cpu_forward() = default;

void cpu_forward::forward(std::span<const std::int32_t> tokens, cache_policy& cache,
                          std::span<float> logits, bool all_logits, const weight_set* projections) {
  const model_config& c = config_;
  const auto n = std::int64_t(tokens.size());
  if (n == 0) throw std::invalid_argument("cpu_forward::forward: no tokens given");
  for (std::int64_t i = 0; i < n; ++i)
    if (tokens[std::size_t(i)] < 0 || tokens[std::size_t(i)] >= c.vocab_size)
      throw std::invalid_argument("cpu_forward::forward: token id " +
                                  std::to_string(tokens[std::size_t(i)]) + " at index " +
                                  std::to_string(i) + " is outside the vocabulary [0, " +
                                  std::to_string(c.vocab_size) + ")");
  const std::int64_t logit_rows = all_logits ? n : 1;
  if (std::int64_t(logits.size()) < logit_rows * c.vocab_size)
    throw std::invalid_argument("cpu_forward::forward: logits span holds " +
                                std::to_string(logits.size()) + " floats, needs " +
                                std::to_string(logit_rows) + " x " + std::to_string(c.vocab_size));

  if (projections && projections != &target_) check_weight_set(c, *projections);
  const weight_set& ws = projections ? *projections : target_;

  scratch& s = *scratch_;
  s.ensure(c, n);
  kc::thread_pool& pool = *pool_;
  const std::int64_t h = c.hidden_size;
  const std::int64_t half = c.head_dim / 2;
  const auto eps = float(c.rms_norm_eps);
  const std::int64_t pos0 = cache.length(0);

  kc::embedding(tokens.data(), n, weights_.embed.data, weights_.embed.type, c.vocab_size, h,
                s.hidden.data());
  for (std::int64_t i = 0; i < n; ++i) s.positions[std::size_t(i)] = pos0 + i;
  kc::rope_cos_sin(s.positions.data(), n, inv_freq_.data(), half, s.cos_t.data(), s.sin_t.data());

  // Row-wise ops over tokens go through the pool too: in a long prefill they
  // are not negligible.
  auto norm_rows = [&](const tensor_view& w, bool add_delta) {
    pool.parallel_for(n, [&](std::int64_t b, std::int64_t e) {
      if (add_delta)
        kc::add_rms_norm(s.hidden.data() + b * h, s.delta.data() + b * h, e - b, h, w.data, w.type,
                         eps, s.normed.data() + b * h);
      else
        kc::rms_norm(s.hidden.data() + b * h, e - b, h, w.data, w.type, eps,
                     s.normed.data() + b * h);
    });
  };

  norm_rows(weights_.layers[0].attn_norm, false);
  for (std::size_t li = 0; li < weights_.layers.size(); ++li) {
    const layer_weights& w = weights_.layers[li];
    const layer_linears& p = ws.layers[li];
    const int layer = int(li);

    project(s.normed.data(), n, p.wq, s.q.data(), pool);
    project(s.normed.data(), n, p.wk, s.k.data(), pool);
    project(s.normed.data(), n, p.wv, s.v.data(), pool);
    kc::rope_apply(s.q.data(), n, c.num_attention_heads, c.head_dim, c.q_dim(), s.cos_t.data(),
                   s.sin_t.data());
    kc::rope_apply(s.k.data(), n, c.num_key_value_heads, c.head_dim, c.kv_dim(), s.cos_t.data(),
                   s.sin_t.data());
    cache.append(layer, s.k.data(), s.v.data(), n);
    cache.attend(layer, s.q.data(), n, pos0, s.attn.data());
    project(s.attn.data(), n, p.wo, s.delta.data(), pool);
    norm_rows(w.mlp_norm, true);  // hidden += attention; normed = post-attention norm

    project(s.normed.data(), n, p.w_gate, s.gate.data(), pool);
    project(s.normed.data(), n, p.w_up, s.up.data(), pool);
    const std::int64_t inter = c.intermediate_size;
    pool.parallel_for(n, [&](std::int64_t b, std::int64_t e) {
      kc::silu_mul(s.gate.data() + b * inter, s.up.data() + b * inter, (e - b) * inter,
                   s.gate.data() + b * inter);
    });
    project(s.gate.data(), n, p.w_down, s.delta.data(), pool);
    // hidden += MLP; normed = the next layer's input norm, or the final norm.
    const bool last = li + 1 == weights_.layers.size();
    norm_rows(last ? weights_.final_norm : weights_.layers[li + 1].attn_norm, true);
  }

  const std::int64_t first_row = n - logit_rows;
  project(s.normed.data() + first_row * h, logit_rows, ws.lm_head, logits.data(), pool);
}


}  // namespace specpipe
