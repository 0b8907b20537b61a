#pragma once
// Progress of a long evaluation, on stderr. On a terminal: one line redrawn
// in place ("\r") with a bar, the count and the rate, at most every 100 ms.
// Elsewhere (a log file, a pipe): a plain line each time another `step_percent`
// of the work is done, so logs stay readable and short.
#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace specpipe {

class progress_meter {
 public:
  // total: units of work (forward passes); unit: what they are called.
  progress_meter(std::ostream& out, std::string label, std::int64_t total, bool interactive,
                 std::string unit = "steps", int step_percent = 10);
  ~progress_meter();
  progress_meter(const progress_meter&) = delete;
  progress_meter& operator=(const progress_meter&) = delete;

  void advance(std::int64_t n = 1);
  // Draws the final state once (idempotent); the destructor calls it.
  void finish();
  std::int64_t done() const { return done_; }

  // "[#####-----]" of `width` cells for fraction in [0, 1].
  static std::string bar(double fraction, int width);

 private:
  void draw_interactive(bool force);
  void draw_lines();

  std::ostream& out_;
  std::string label_;
  std::int64_t total_;
  bool interactive_;
  std::string unit_;
  int step_percent_;
  std::int64_t done_ = 0;
  int next_percent_;  // line mode: the next threshold to report
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace specpipe
