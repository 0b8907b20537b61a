#pragma once
// The model's tensors, bound by name from a checkpoint and checked against the
// config. Views point into the memory-mapped files (host) in their stored dtype
// (f32, f16 or bf16); compute backends convert on the fly or upload.
#include <vector>

#include "memory/tensor.hpp"
#include "model/config.hpp"
#include "model/safetensors.hpp"

namespace specpipe {

struct layer_weights {
  tensor_view attn_norm;  // [hidden]
  tensor_view wq;         // [q_dim, hidden]    (HF: out_features x in_features)
  tensor_view wk;         // [kv_dim, hidden]
  tensor_view wv;         // [kv_dim, hidden]
  tensor_view wo;         // [hidden, q_dim]
  tensor_view mlp_norm;   // [hidden]
  tensor_view w_gate;     // [intermediate, hidden]
  tensor_view w_up;       // [intermediate, hidden]
  tensor_view w_down;     // [hidden, intermediate]
};

struct model_weights {
  tensor_view embed;       // [vocab, hidden]
  tensor_view final_norm;  // [hidden]
  tensor_view lm_head;     // [vocab, hidden]; the embedding when tied
  std::vector<layer_weights> layers;
};

// Binds `model.embed_tokens.weight`, `model.layers.N.*`, `model.norm.weight`,
// `lm_head.weight`; throws model_error naming the missing tensor or the wrong
// shape/dtype (expected vs found).
model_weights bind_weights(const checkpoint& ckpt, const model_config& config);

}  // namespace specpipe
