#pragma once
// One timeline event, as the actors report it to the tracer. Times are
// microseconds on one host clock (trace_clock); GPU spans arrive already
// converted to it. Maps one to one onto Chrome Trace Event phases.
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "actors/ids.hpp"

namespace specpipe {

enum class trace_phase : char {
  span = 'X',        // a complete event: ts + dur on a track
  flow_start = 's',  // a top-k request leaves the planner
  flow_step = 't',   // ... its transfer
  flow_end = 'f',    // ... the step that consumed it
  counter = 'C',     // named values over time
  instant = 'i',
};

// Categories trace_summary relies on: overlap = transfer time hidden under
// compute; step times = "decode" spans of category compute or control.
namespace trace_cat {
inline constexpr const char* compute = "compute";
inline constexpr const char* transfer = "transfer";
inline constexpr const char* control = "control";
}  // namespace trace_cat

struct trace_event {
  trace_phase phase = trace_phase::span;
  std::string track;  // the actor ("scheduler", "worker 0", "cuda stream 1", ...)
  std::string name;
  std::string cat;
  double ts_us = 0;
  double dur_us = 0;  // spans only
  flow_id id = 0;     // flows only
  std::vector<std::pair<std::string, double>> values;  // counters, or span args
};

// Microseconds since the first call in this process, on steady_clock.
double trace_now_us();

}  // namespace specpipe
