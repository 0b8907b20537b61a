#pragma once
// Token selection on the GPU, one block per row of logits, so that only the
// chosen ids (not vocab-sized rows) cross to the host.
#include <cstdint>

#include "kernels/cuda/cuda_error.hpp"

namespace specpipe::kernels::cuda {

// out[r] = argmax_i logits[r][i] (lowest index on ties; NaN never wins).
void argmax_rows(const float* logits, std::int64_t ld, std::int64_t rows, std::int64_t vocab,
                 std::int32_t* out, stream_t s);

struct gpu_sampling {
  float temperature = 1.0f;  // > 0 (temperature 0 is argmax_rows)
  std::int32_t top_k = 0;    // 0 = off
  float top_p = 1.0f;        // (0, 1]
  std::uint64_t seed = 0;
  std::uint64_t counter = 0;  // row r draws uniform(seed, counter + r)
};

// Samples from softmax(logits / temperature) restricted to the top-k tokens
// (all tokens tied with the k-th are kept) and then to the smallest set of
// most likely tokens whose mass reaches top_p (ties at the threshold kept).
// Thresholds are found by bisection on the float bit pattern, so no sort and
// no scratch memory; the draw inverts the kept mass's CDF in vocabulary order.
void sample_rows(const float* logits, std::int64_t ld, std::int64_t rows, std::int64_t vocab,
                 const gpu_sampling& p, std::int32_t* out, stream_t s);

}  // namespace specpipe::kernels::cuda
