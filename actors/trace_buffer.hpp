#pragma once
// The tracer's store of events, and its Chrome Trace Event JSON writer (opens
// in ui.perfetto.dev and chrome://tracing): one process, one thread id per
// track with thread_name metadata, X spans, s/t/f flows bound to their
// enclosing spans, C counters.
#include <cstddef>
#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "actors/trace_event.hpp"

namespace specpipe {

class trace_buffer {
 public:
  // Events beyond `max_events` are counted as dropped, not stored, so a long
  // run cannot exhaust memory through its trace.
  explicit trace_buffer(std::size_t max_events = std::size_t(1) << 22);

  void add(trace_event e);
  // A GPU span reported by a worker as (stream, start, end) on the host clock.
  void add_gpu_span(int device, int stream, std::string name, double start_us, double end_us);

  std::size_t size() const { return events_.size(); }
  std::size_t dropped() const { return dropped_; }
  const std::vector<trace_event>& events() const { return events_; }

  // Thread ids in order of first appearance, from 1.
  int track_id(const std::string& track);

  void write_json(std::ostream& os);
  // Writes atomically (temporary file, then rename); throws std::runtime_error
  // naming the file on failure.
  void write_file(const std::filesystem::path& path);

 private:
  std::size_t max_events_;
  std::size_t dropped_ = 0;
  std::vector<trace_event> events_;
  std::map<std::string, int> tracks_;
  std::vector<std::string> track_order_;
};

}  // namespace specpipe
