#include "model/weights.hpp"

#include <string>

#include "model/model_error.hpp"

namespace specpipe {
namespace {

struct expected_dim {
  std::int64_t size;
  const char* meaning;  // "hidden_size", "num_key_value_heads * head_dim", ...
};

// Looks the tensor up and checks its dtype and shape against the config;
// the error names the tensor, its file, and expected vs found.
tensor_view bind(const checkpoint& ckpt, const std::string& name, std::initializer_list<expected_dim> dims) {
  const tensor_entry& e = ckpt.get(name);
  if (e.type != dtype::f32 && e.type != dtype::f16 && e.type != dtype::bf16)
    throw model_error(e.file, name,
                      "dtype " + std::string(dtype_name(e.type)) + " is not a weight dtype (expected f32, f16 or bf16)");
  bool match = e.shape.size() == dims.size();
  std::string expected = "[";
  std::string meaning;
  std::size_t i = 0;
  for (const auto& d : dims) {
    match = match && e.shape[i] == d.size;
    expected += (i ? ", " : "") + std::to_string(d.size);
    meaning += std::string(i ? " x " : "") + d.meaning;
    ++i;
  }
  expected += "]";
  if (!match)
    throw model_error(e.file, name, "expected shape " + expected + " (" + meaning + "), found " + shape_text(e.shape));
  return e.view();
}

}  // namespace

model_weights bind_weights(const checkpoint& ckpt, const model_config& c) {
  const expected_dim vocab{c.vocab_size, "vocab_size"};
  const expected_dim hidden{c.hidden_size, "hidden_size"};
  const expected_dim q{c.q_dim(), "num_attention_heads * head_dim"};
  const expected_dim kv{c.kv_dim(), "num_key_value_heads * head_dim"};
  const expected_dim inter{c.intermediate_size, "intermediate_size"};

  model_weights w;
  w.embed = bind(ckpt, "model.embed_tokens.weight", {vocab, hidden});
  w.final_norm = bind(ckpt, "model.norm.weight", {hidden});
  if (c.tie_word_embeddings) {
    // Tied checkpoints usually omit lm_head.weight; when one is stored anyway
    // transformers ignores it in favour of the embedding, and so do we.
    w.lm_head = w.embed;
  } else {
    if (!ckpt.find("lm_head.weight"))
      throw model_error(ckpt.dir(), "lm_head.weight",
                        "missing, and tie_word_embeddings is false in config.json (an untied model needs its own "
                        "output projection)");
    w.lm_head = bind(ckpt, "lm_head.weight", {vocab, hidden});
  }

  w.layers.reserve(std::size_t(c.num_hidden_layers));
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    layer_weights l;
    l.attn_norm = bind(ckpt, p + "input_layernorm.weight", {hidden});
    l.wq = bind(ckpt, p + "self_attn.q_proj.weight", {q, hidden});
    l.wk = bind(ckpt, p + "self_attn.k_proj.weight", {kv, hidden});
    l.wv = bind(ckpt, p + "self_attn.v_proj.weight", {kv, hidden});
    l.wo = bind(ckpt, p + "self_attn.o_proj.weight", {hidden, q});
    l.mlp_norm = bind(ckpt, p + "post_attention_layernorm.weight", {hidden});
    l.w_gate = bind(ckpt, p + "mlp.gate_proj.weight", {inter, hidden});
    l.w_up = bind(ckpt, p + "mlp.up_proj.weight", {inter, hidden});
    l.w_down = bind(ckpt, p + "mlp.down_proj.weight", {hidden, inter});
    w.layers.push_back(l);
  }
  // A checkpoint with more layers than the config asks for is a mismatch the
  // user should hear about, not a silently truncated model.
  const std::string extra = "model.layers." + std::to_string(c.num_hidden_layers) + ".input_layernorm.weight";
  if (ckpt.find(extra))
    throw model_error(ckpt.dir(), extra,
                      "the checkpoint has more layers than num_hidden_layers = " + std::to_string(c.num_hidden_layers));
  return w;
}

}  // namespace specpipe
