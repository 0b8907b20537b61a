#pragma once
// How many tokens the draft proposes per round (gamma): fixed, or adapted to
// the acceptance and costs measured so far (`--gamma auto`).
//
// The rule (Leviathan et al. 2023, sec. 3.3-3.4): with per-token acceptance
// rate alpha and a draft step costing c target verifications, a round of gamma
// drafts yields E = (1 - alpha^(gamma+1)) / (1 - alpha) tokens for gamma*c + 1
// units of time, so the speedup over plain decoding is
//     S(gamma) = (1 - alpha^(gamma+1)) / ((1 - alpha) (gamma c + 1)),
// and the controller picks the gamma in [min, max] that maximizes it. alpha
// is estimated from the rounds as accepted / (accepted + rejections), the
// maximum-likelihood rate of a geometric run cut at gamma, with exponential
// forgetting (weight `smoothing` per round) and one pseudo-acceptance and
// one pseudo-rejection so it never reaches 0 or 1; c is the draft step time
// over the verify time, smoothed the same way. The verify is assumed to cost
// the same for any gamma, true where a forward is bound by reading weights
// (a GPU at small batch) and optimistic on the CPU, where it grows with the
// gamma + 1 tokens it runs (the measured c then rises and gamma falls).
//
// A measured c makes the schedule of gammas depend on timing. Greedy output
// does not depend on it, but sampled output does (how many draws a round
// takes depends on its gamma), so a run that must be reproducible from its
// seed fixes c instead (fixed_cost_ratio; model/draft_weights.hpp has an
// estimate from the bytes each step reads).
#include <string_view>

namespace specpipe {

struct gamma_options {
  int gamma = 5;           // fixed gamma, or the first rounds' gamma with adaptive
  bool adaptive = false;   // --gamma auto
  int min_gamma = 1;
  int max_gamma = 16;
  double smoothing = 0.9;  // weight of the past per observed round
  double fixed_cost_ratio = 0;  // > 0: use this c instead of measuring it
};

// "5" -> fixed 5; "auto" -> adaptive starting at 4. Throws
// std::invalid_argument starting "--gamma:" for anything else or a gamma
// outside [1, 16].
gamma_options parse_gamma(std::string_view text);

class gamma_controller {
 public:
  // Throws std::invalid_argument naming a bad option.
  explicit gamma_controller(const gamma_options& opts = {});

  // The gamma for the next round.
  int gamma() const { return gamma_; }
  // One verified round: `drafted` tokens proposed, `accepted` kept; the time
  // of one draft step and of the verify forward.
  void observe(int drafted, int accepted, double draft_step_seconds, double verify_seconds);

  double acceptance() const;  // smoothed alpha
  double cost_ratio() const { return cost_ratio_; }
  const gamma_options& options() const { return opts_; }

  // S(gamma) above; alpha in [0, 1], c >= 0.
  static double expected_speedup(double alpha, int gamma, double c);
  // The gamma in [lo, hi] with the largest S (the smallest on ties).
  static int best_gamma(double alpha, double c, int lo, int hi);

 private:
  gamma_options opts_;
  int gamma_;
  double accepted_ = 0, rejections_ = 0;
  double cost_ratio_ = 0;
  bool measured_ = false;
};

}  // namespace specpipe
