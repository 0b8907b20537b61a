#pragma once
// The GPU backend's QuantSpec compute: the CUDA twin of
// actors/quantspec_step_compute.hpp behind the pipeline's worker. One
// cuda_forward over a hierarchical INT4/INT8 cache and one cuda_model with
// the draft's 4-bit copies (quantized on the device); per sequence a cache
// slot and a cuda_quantspec holding the sequence's sampler and gamma
// controller. A prefill runs the prompt through the target and picks the
// first token; each decode step is one round (gamma drafts, one verify of
// gamma + 1 rows) and returns the kept drafts plus the correction or bonus
// token in step_output::tokens, with the round's counters and its draft and
// verify spans. The cache stays on the device: outputs carry no rows.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "actors/step_compute.hpp"
#include "model/config.hpp"
#include "model/draft_weights.hpp"
#include "model/gamma_controller.hpp"
#include "model/weights.hpp"

namespace specpipe {

struct cuda_quantspec_step_options {
  int device = 0;
  std::int64_t max_context = 0;  // tokens per sequence cache
  int max_sequences = 1;         // cache slots: sequences at once
  std::int64_t kv_group = 128;   // G of the hierarchical cache: 32, 64 or 128 on the GPU
  draft_options draft;           // the 4-bit weights (lm_head stays shared on the GPU)
  gamma_options gamma;           // fixed or adaptive draft length (at most 15 per round here)
};

// Uploads the weights and quantizes the draft on the device, on the calling
// thread (lm_head too with opts.draft.quantize_lm_head, --draft-lm-head).
// Throws std::invalid_argument naming an option it cannot run (a group the
// GPU cache lacks, a fixed gamma above what a round can roll back) and
// std::runtime_error without a device.
std::shared_ptr<step_compute> make_cuda_quantspec_step_compute(const model_config& config,
                                                               const model_weights& weights,
                                                               const cuda_quantspec_step_options& opts);

// Device bytes such a compute allocates: the 16-bit weights, the draft's
// 4-bit copies, the caches of every slot and the forward's scratch.
std::size_t cuda_quantspec_step_device_bytes(const model_config& config, const cuda_quantspec_step_options& opts);

}  // namespace specpipe
