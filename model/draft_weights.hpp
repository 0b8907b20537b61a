#pragma once
// QuantSpec's draft model (Tiwari et al. 2025, sec. 4.2): the target's
// projections quantized to 4 bits, group-wise along the input dimension
// (kernels/int4_linear.hpp has the format and why). Embedding and norms are
// shared with the target, and so is lm_head unless quantize_lm_head: the
// draft costs only the packed copies, on top of the 16-bit weights that the
// target keeps.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/int4_linear.hpp"
#include "model/config.hpp"
#include "model/weight_set.hpp"
#include "model/weights.hpp"

namespace specpipe {

namespace kernels::cpu { class thread_pool; }

struct draft_options {
  std::int64_t group = 128;       // g, columns per (row, group) scale and zero
  bool quantize_lm_head = false;  // also pack lm_head (the largest single matrix)
};

class draft_weights {
 public:
  // Quantizes every projection of `target` (rows in parallel on `pool`).
  // Throws std::invalid_argument naming a bad option or tensor.
  draft_weights(const model_config& config, const model_weights& target, const draft_options& opts,
                kernels::cpu::thread_pool* pool = nullptr);
  draft_weights(const draft_weights&) = delete;  // the set points into the packed copies
  draft_weights& operator=(const draft_weights&) = delete;

  // What cpu_forward multiplies by when it runs the draft.
  const weight_set& set() const { return set_; }
  const draft_options& options() const { return opts_; }
  // Bytes of the packed copies: the memory the draft adds to the target's.
  std::size_t bytes() const;

 private:
  draft_options opts_;
  std::vector<kernels::cpu::int4_weights> packed_;
  weight_set set_;
};

// The draft's extra bytes for a model shape, without quantizing anything.
std::size_t draft_bytes(const model_config& config, const draft_options& opts);
// All weights of the shape at 16 bits (embedding, untied lm_head, norms, projections).
std::size_t weight_bytes_16bit(const model_config& config);
// The draft step's cost relative to a target step, estimated as the weight
// bytes each reads (projections and lm_head; the embedding row and the KV
// cache are left out): what a step costs where decoding is bound by memory.
double draft_cost_estimate(const model_config& config, const draft_options& opts);
// "draft: 4-bit g128 projections, +3.46 MiB over 26.6 MiB of 16-bit weights (+13.0%); lm_head shared"
std::string describe_draft_memory(const model_config& config, const draft_options& opts);

}  // namespace specpipe
