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

// A 4-bit copy of one projection (kernels/int4_linear.hpp's format) for
// QuantSpec's draft. Rows: codes [out][code_stride], f16 scale and zero
// [out][groups]. Tiles (kernels/int4_tiled.hpp, int4 GEMV version 7): the
// tiled codes and scale_zero; scale and zero empty, code_stride 0.
struct cuda_int4 {
  buffer codes, scale, zero, scale_zero;
  std::int64_t out = 0, in = 0, group = 0, code_stride = 0;
  kernels::cuda::int4_layout layout = kernels::cuda::int4_layout::rows;
  // The qkv weight's first pair_rows rows (q and k) in RoPE pair order, heads
  // of pair_head_dim (int4_gemv_args::pair_rows); 0: natural order.
  std::int64_t pair_rows = 0;
  int pair_head_dim = 0;
  std::size_t bytes() const { return codes.size() + scale.size() + zero.size() + scale_zero.size(); }
};

struct cuda_layer {
  buffer attn_norm;  // f32 [hidden]
  buffer wqkv;       // bf16 [q_dim + 2 kv_dim, hidden]: wq, wk, wv rows stacked
  buffer wo;         // bf16 [hidden, q_dim]
  buffer mlp_norm;   // f32 [hidden]
  buffer wgu;        // bf16 [2 intermediate, hidden]: w_gate rows, then w_up rows
  buffer wdown;      // bf16 [hidden, intermediate]
  // The draft's copies (cuda_model::make_draft), empty until made.
  cuda_int4 wqkv_q, wo_q, wgu_q, wdown_q;
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
  std::int64_t draft_group = 0;  // 0: no draft weights
  cuda_int4 lm_head_q;           // the draft's 4-bit lm_head (make_draft with lm_head); empty: shared
  kernels::cuda::int4_layout draft_layout = kernels::cuda::int4_layout::rows;

  const std::uint16_t* lm_head_ptr() const {
    return lm_head.data() ? lm_head.as<std::uint16_t>() : embed.as<std::uint16_t>();
  }
};

}  // namespace specpipe
