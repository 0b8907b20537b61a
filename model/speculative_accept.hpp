#pragma once
// Verification of a drafted block of tokens against the target's
// distributions at the same positions, the one-forward check of speculative
// decoding. Pure functions over caller-owned arrays.
//
// Greedy: draft i is kept while it equals the target's argmax at its
// position; the first mismatch is replaced by that argmax (the correction),
// and when all gamma are kept the target's argmax after them is a bonus
// token. The output is then token for token what greedy decoding of the
// target alone gives.
//
// Sampled (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023): with the
// draft token x drawn from q, keep it with probability min(1, p(x) / q(x));
// at the first rejection draw the correction from normalize(max(0, p - q)),
// and when all are kept draw the bonus from the target's next p. Every output
// token is then distributed exactly as p, whatever q is (Leviathan et al.,
// Theorem 3.5): the speedup costs nothing in quality.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace specpipe {

struct accept_result {
  std::vector<std::int32_t> tokens;  // the kept drafts, then the correction or bonus token
  int accepted = 0;                  // drafts kept: tokens.size() - 1
};

// target_logits: [drafts.size() + 1][vocab]; row i scores the token after
// drafts[0 .. i-1] (row 0: after the last token already accepted).
// Throws std::invalid_argument on bad sizes or all-NaN rows.
accept_result accept_greedy(std::span<const std::int32_t> drafts, std::span<const float> target_logits,
                            std::int64_t vocab);

// p: [gamma + 1][vocab] target distributions, q: [gamma][vocab] draft
// distributions, drafts[i] drawn from q's row i. `uniform` returns draws in
// [0, 1) (the sequence's generator); scratch holds vocab floats.
accept_result accept_sampled(std::span<const std::int32_t> drafts, std::span<const float> p, std::span<const float> q,
                             std::int64_t vocab, const std::function<double()>& uniform, std::span<float> scratch);

// out = max(0, p - q), the part of p that q under-proposes; returns its mass.
// The correction is drawn from it after normalization (sampling from an
// unnormalized vector normalizes: kernels/sampling.hpp's sample_categorical).
double residual_distribution(const float* p, const float* q, std::int64_t vocab, float* out);

}  // namespace specpipe
