#include "model/eval_progress.hpp"

#include <algorithm>
#include <cstdio>

namespace specpipe {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

progress_meter::progress_meter(std::ostream& out, std::string label, std::int64_t total, bool interactive,
                               std::string unit, int step_percent)
    : out_(out), label_(std::move(label)), total_(std::max<std::int64_t>(total, 1)), interactive_(interactive),
      unit_(std::move(unit)), step_percent_(std::clamp(step_percent, 1, 100)), next_percent_(step_percent_),
      start_(clock_type::now()), last_draw_(start_) {
  if (interactive_) draw_interactive(true);
}

progress_meter::~progress_meter() { finish(); }

std::string progress_meter::bar(double fraction, int width) {
  fraction = std::clamp(fraction, 0.0, 1.0);
  const int full = int(fraction * width + 1e-9);
  std::string out;
  out.reserve(std::size_t(width) + 2);
  out.push_back('[');
  out.append(std::size_t(full), '#');
  out.append(std::size_t(width - full), '-');
  out.push_back(']');
  return out;
}

void progress_meter::advance(std::int64_t n) {
  if (finished_) return;
  done_ = std::min(done_ + n, total_);
  if (interactive_) draw_interactive(done_ == total_);
  else draw_lines();
}

void progress_meter::finish() {
  if (finished_) return;
  if (interactive_) {
    draw_interactive(true);
    out_ << "\n";
  } else if (done_ < total_) {
    // Stopped early (an error): say where, so the log shows how far it got.
    char line[160];
    std::snprintf(line, sizeof line, "%s: stopped at %lld/%lld %s\n", label_.c_str(),
                  static_cast<long long>(done_), static_cast<long long>(total_), unit_.c_str());
    out_ << line;
  }
  out_.flush();
  finished_ = true;
}

void progress_meter::draw_interactive(bool force) {
  const auto now = clock_type::now();
  if (!force && seconds_between(last_draw_, now) < 0.1) return;
  last_draw_ = now;
  const double frac = double(done_) / double(total_);
  const double secs = seconds_between(start_, now);
  const double rate = secs > 0 ? double(done_) / secs : 0;
  char tail[160];
  std::snprintf(tail, sizeof tail, " %3d%% %lld/%lld %s, %.1f/s", int(frac * 100),
                static_cast<long long>(done_), static_cast<long long>(total_), unit_.c_str(), rate);
  out_ << "\r" << label_ << " " << bar(frac, 30) << tail << "\x1b[K" << std::flush;
}

void progress_meter::draw_lines() {
  const int percent = int(100 * done_ / total_);
  if (percent < next_percent_) return;
  const double secs = seconds_between(start_, clock_type::now());
  char line[200];
  std::snprintf(line, sizeof line, "%s: %d%% (%lld/%lld %s, %.1f s)\n", label_.c_str(), percent,
                static_cast<long long>(done_), static_cast<long long>(total_), unit_.c_str(), secs);
  out_ << line << std::flush;
  // Skip thresholds already passed by a large advance.
  next_percent_ = (percent / step_percent_ + 1) * step_percent_;
}

}  // namespace specpipe
