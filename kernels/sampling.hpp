#pragma once
// The arithmetic of token selection, in the order Hugging Face's logits
// warpers apply it: temperature, top-k, top-p. All functions work in place on
// caller-owned arrays and allocate nothing.
#include <cstdint>

namespace specpipe::kernels::cpu {

// Index of the largest value (the first one on ties); NaNs are skipped.
// Returns -1 when n == 0 or every value is NaN.
std::int64_t argmax(const float* x, std::int64_t n);

// probs = softmax(logits / temperature), max-subtracted, normalized with a
// double sum. temperature must be > 0. -inf logits get probability 0.
// probs may alias logits.
void softmax(const float* logits, std::int64_t n, float temperature, float* probs);

// Sets every logit strictly below the k-th largest to -inf (HF
// TopKLogitsWarper: ties with the k-th value survive). k <= 0 or k >= n
// leaves logits unchanged. scratch: n floats. Returns the survivors' count.
std::int64_t top_k_filter(float* logits, std::int64_t n, std::int64_t k, float* scratch);

// Nucleus filter on probabilities (they must sum to 1): keeps the smallest set
// of most probable tokens whose mass reaches top_p (the token that crosses
// top_p stays; at least one token stays), zeroes the rest and renormalizes
// the kept ones to sum to 1. Equivalent to HF TopPLogitsWarper, which removes
// the tokens whose ascending cumulative mass is <= 1 - top_p. order: n int32
// scratch. Returns the survivors' count.
std::int64_t top_p_filter(float* probs, std::int64_t n, float top_p, std::int32_t* order);

// Index drawn from the categorical distribution `probs` (non-negative, not
// necessarily normalized) given u uniform in [0, 1): the first index whose
// cumulative mass exceeds u * total. Zero-mass entries are never returned.
std::int64_t sample_categorical(const float* probs, std::int64_t n, double u);

}  // namespace specpipe::kernels::cpu
