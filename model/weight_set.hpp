#pragma once
// The projections one forward pass multiplies by. QuantSpec's target and
// draft share the embedding and the norms (model_weights) and differ only
// here: each linear is either a dense float tensor (the checkpoint's 16-bit
// weights) or a packed 4-bit matrix (model/draft_weights.hpp). cpu_forward
// takes a set per call, so one forward object and one KV cache serve both.
#include <cstdint>
#include <vector>

#include "kernels/int4_linear.hpp"
#include "memory/tensor.hpp"
#include "model/weights.hpp"

namespace specpipe {

struct linear_weight {
  tensor_view dense;                // [out, in] f32/f16/bf16, when int4 is empty
  kernels::cpu::int4_matrix int4;  // the packed 4-bit form, host memory

  bool is_int4() const { return !int4.empty(); }
  std::int64_t out() const { return is_int4() ? int4.out : (dense.rank == 2 ? dense.shape[0] : 0); }
  std::int64_t in() const { return is_int4() ? int4.in : (dense.rank == 2 ? dense.shape[1] : 0); }
};

struct layer_linears {
  linear_weight wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct weight_set {
  std::vector<layer_linears> layers;
  linear_weight lm_head;
};

// The checkpoint's own projections (the target), as dense views.
weight_set dense_weight_set(const model_weights& w);

}  // namespace specpipe
