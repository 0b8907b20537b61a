#include "model/gamma_controller.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace specpipe {

gamma_options parse_gamma(std::string_view text) {
  gamma_options o;
  if (text == "auto") {
    o.adaptive = true;
    o.gamma = 4;
    return o;
  }
  const std::string t(text);
  std::size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (t.empty() || used != t.size())
    throw std::invalid_argument("--gamma: '" + t + "' is neither a number of draft tokens nor 'auto'");
  if (v < o.min_gamma || v > o.max_gamma)
    throw std::invalid_argument("--gamma: must be in [" + std::to_string(o.min_gamma) + ", " +
                                std::to_string(o.max_gamma) + "], got " + t);
  o.gamma = v;
  return o;
}

gamma_controller::gamma_controller(const gamma_options& opts) : opts_(opts), gamma_(opts.gamma) {
  if (opts.min_gamma < 1 || opts.max_gamma < opts.min_gamma)
    throw std::invalid_argument("gamma controller: need 1 <= min_gamma <= max_gamma, got " +
                                std::to_string(opts.min_gamma) + " and " + std::to_string(opts.max_gamma));
  if (opts.gamma < opts.min_gamma || opts.gamma > opts.max_gamma)
    throw std::invalid_argument("gamma controller: gamma " + std::to_string(opts.gamma) + " outside [" +
                                std::to_string(opts.min_gamma) + ", " + std::to_string(opts.max_gamma) + "]");
  if (!(opts.fixed_cost_ratio >= 0))
    throw std::invalid_argument("gamma controller: fixed_cost_ratio must be >= 0 (0: measured), got " +
                                std::to_string(opts.fixed_cost_ratio));
  if (!(opts.smoothing >= 0 && opts.smoothing < 1))
    throw std::invalid_argument("gamma controller: smoothing must be in [0, 1), got " +
                                std::to_string(opts.smoothing));
}

double gamma_controller::acceptance() const { return (accepted_ + 1) / (accepted_ + rejections_ + 2); }

void gamma_controller::observe(int drafted, int accepted, double draft_step_seconds, double verify_seconds) {
  if (drafted <= 0 || accepted < 0 || accepted > drafted) return;  // no draft this round: nothing learned
  const double keep = opts_.smoothing;
  accepted_ = keep * accepted_ + accepted;
  rejections_ = keep * rejections_ + (accepted < drafted ? 1 : 0);
  if (opts_.fixed_cost_ratio > 0) {
    cost_ratio_ = opts_.fixed_cost_ratio;
    measured_ = true;
  } else if (verify_seconds > 0 && draft_step_seconds >= 0) {
    const double c = draft_step_seconds / verify_seconds;
    cost_ratio_ = measured_ ? keep * cost_ratio_ + (1 - keep) * c : c;
    measured_ = true;
  }
  if (opts_.adaptive && measured_)
    gamma_ = best_gamma(acceptance(), cost_ratio_, opts_.min_gamma, opts_.max_gamma);
}

double gamma_controller::expected_speedup(double alpha, int gamma, double c) {
  // sum_{i=0..gamma} alpha^i, which is the closed form's numerator over
  // (1 - alpha) and stays finite at alpha = 1.
  double tokens = 0, term = 1;
  for (int i = 0; i <= gamma; ++i, term *= alpha) tokens += term;
  return tokens / (gamma * c + 1);
}

int gamma_controller::best_gamma(double alpha, double c, int lo, int hi) {
  int best = lo;
  double best_s = expected_speedup(alpha, lo, c);
  for (int g = lo + 1; g <= hi; ++g) {
    const double s = expected_speedup(alpha, g, c);
    if (s > best_s) {
      best_s = s;
      best = g;
    }
  }
  return best;
}

}  // namespace specpipe
