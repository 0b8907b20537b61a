#pragma once
// Reading a Chrome trace back, and the figures that tell whether the pipeline
// overlaps: per-track busy time, the share of transfer time hidden under
// compute, and step-time percentiles. Used by `specpipe trace summary` and
// `specpipe trace render`, and by the tests on traces the tracer wrote.
#include <cstdint>
#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "actors/trace_event.hpp"

namespace specpipe {

struct parsed_span {
  std::string track, name, cat;
  double ts_us = 0, dur_us = 0;
};
struct parsed_flow {
  char phase = 's';  // 's', 't' or 'f'
  std::uint64_t id = 0;
  std::string track;
  double ts_us = 0;
};
struct parsed_counter {
  std::string track, name;
  double ts_us = 0;
  std::map<std::string, double> values;
};

struct parsed_trace {
  std::vector<std::string> tracks;  // by thread_sort_index / first appearance
  std::vector<parsed_span> spans;
  std::vector<parsed_flow> flows;
  std::vector<parsed_counter> counters;
  double t_begin_us = 0, t_end_us = 0;
};

// Throws std::runtime_error naming the file and the event at fault.
parsed_trace parse_trace_json(const std::string& text, const std::string& origin);
parsed_trace load_trace(const std::filesystem::path& path);

struct track_summary {
  std::string track;
  double busy_us = 0;  // union of its spans
  std::int64_t spans = 0;
  double busy_share = 0;  // of the trace's wall time
};

struct trace_summary {
  std::vector<track_summary> tracks;
  double wall_us = 0;
  double transfer_us = 0;        // union of transfer spans
  double hidden_transfer_us = 0;  // ... of it under compute spans, less their "wait rows" parts
  double overlap_pct = 0;        // hidden / transfer * 100 (0 without transfers)
  std::int64_t steps = 0;        // "decode" compute spans
  double step_p50_us = 0, step_p90_us = 0, step_p99_us = 0;
  std::int64_t flows = 0;        // distinct flow ids
};

trace_summary summarize(const parsed_trace& t);

// Nearest-rank percentile (q in [0, 100]) of unsorted values; 0 when empty.
double percentile(std::vector<double> values, double q);

// The table `specpipe trace summary` prints.
void print_summary(std::ostream& os, const trace_summary& s);

}  // namespace specpipe
