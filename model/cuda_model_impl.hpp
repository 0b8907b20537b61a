#pragma once
// The device-side weights of cuda_model, shared by model/cuda_model.cpp and
// model/cuda_forward.cpp only (not a public interface).
#include <cstdint>
#include <memory>
#include <vector>

#include "memory/allocator.hpp"
#include "model/config.hpp"
#include "model/cuda_forward.hpp"

namespace specpipe {

struct cuda_layer {
  buffer attn_norm;  // f32 [hidden]
  buffer wqkv;       // bf16 [q_dim + 2 kv_dim, hidden]: wq, wk, wv rows stacked
  buffer wo;         // bf16 [hidden, q_dim]
  buffer mlp_norm;   // f32 [hidden]
  buffer wgu;        // bf16 [2 intermediate, hidden]: w_gate rows, then w_up rows
  buffer wdown;      // bf16 [hidden, intermediate]
};

struct cuda_model::impl {
  model_config config;
  int device = 0;
  std::unique_ptr<allocator> alloc;
  buffer embed;       // bf16 [vocab, hidden]
  buffer final_norm;  // f32 [hidden]
  buffer lm_head;     // bf16 [vocab, hidden]; empty when tied to the embedding
  buffer inv_freq;    // f32 [head_dim / 2]
  std::vector<cuda_layer> layers;

  const std::uint16_t* lm_head_ptr() const {
    return lm_head.data() ? lm_head.as<std::uint16_t>() : embed.as<std::uint16_t>();
  }
};

}  // namespace specpipe
