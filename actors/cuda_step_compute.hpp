#pragma once
// The GPU backend's step compute: cuda_forward on one device, one cache slot
// per sequence, the decode entries of a step batched into one forward (one
// CUDA graph per batch size). The caches stay on the device (bf16 rows, or
// the packed codes of kivi / hier read as INT4 or INT8), so nothing goes to
// the host KV store: outputs carry no rows. SpeCache (host store, top-k
// fetch) and QuantSpec (rounds) have computes of their own
// (actors/cuda_specache_step_compute.hpp, cuda_quantspec_step_compute.hpp);
// this one refuses SpeCache.
//
// A worker thread that is not the constructing one is bound to the device at
// each step (cuda_forward::bind_thread), so workers on several devices run
// side by side.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "actors/step_compute.hpp"
#include "model/config.hpp"
#include "model/kv_mode.hpp"
#include "model/weights.hpp"

namespace specpipe {

struct cuda_step_options {
  int device = 0;
  std::int64_t max_context = 0;  // tokens per sequence cache
  int max_sequences = 8;         // cache slots: sequences at once, and the largest decode batch
  kv_mode kv;                    // full, kivi or hier
};

// Uploads the weights (bf16) to the device on the calling thread; `weights`
// may be dropped afterwards. Throws std::invalid_argument for options it
// cannot run (naming them) and std::runtime_error without a device.
std::shared_ptr<step_compute> make_cuda_step_compute(const model_config& config, const model_weights& weights,
                                                     const cuda_step_options& opts);

// Device bytes such a compute allocates: weights, caches of every slot and
// the forward's scratch (what --gpu-memory checks).
std::size_t cuda_step_device_bytes(const model_config& config, const cuda_step_options& opts);

}  // namespace specpipe
