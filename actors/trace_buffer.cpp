#include "actors/trace_buffer.hpp"

#include <boost/json.hpp>

#include <fstream>
#include <stdexcept>
#include <system_error>

namespace specpipe {

double trace_now_us() {
  static const auto epoch = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - epoch).count();
}

trace_buffer::trace_buffer(std::size_t max_events) : max_events_(max_events) {}

int trace_buffer::track_id(const std::string& track) {
  const auto [it, fresh] = tracks_.emplace(track, int(tracks_.size()) + 1);
  if (fresh) track_order_.push_back(track);
  return it->second;
}

void trace_buffer::add(trace_event e) {
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  track_id(e.track);
  events_.push_back(std::move(e));
}

void trace_buffer::add_gpu_span(int device, int stream, std::string name, double start_us, double end_us) {
  trace_event e;
  e.track = "gpu " + std::to_string(device) + " stream " + std::to_string(stream);
  e.name = std::move(name);
  e.cat = trace_cat::compute;
  e.ts_us = start_us;
  e.dur_us = end_us > start_us ? end_us - start_us : 0;
  add(std::move(e));
}

void trace_buffer::write_json(std::ostream& os) {
  namespace json = boost::json;
  json::array out;
  constexpr int pid = 1;
  out.push_back({{"ph", "M"}, {"pid", pid}, {"name", "process_name"}, {"args", {{"name", "specpipe"}}}});
  for (const auto& track : track_order_) {
    const int tid = tracks_.at(track);
    out.push_back({{"ph", "M"}, {"pid", pid}, {"tid", tid}, {"name", "thread_name"}, {"args", {{"name", track}}}});
    // Perfetto orders tracks by this index: keep the order of appearance.
    out.push_back({{"ph", "M"}, {"pid", pid}, {"tid", tid}, {"name", "thread_sort_index"},
                   {"args", {{"sort_index", tid}}}});
  }
  for (const auto& e : events_) {
    json::object o;
    o["ph"] = std::string(1, static_cast<char>(e.phase));
    o["pid"] = pid;
    o["tid"] = tracks_.at(e.track);
    o["name"] = e.name;
    if (!e.cat.empty()) o["cat"] = e.cat;
    o["ts"] = e.ts_us;
    json::object args;
    for (const auto& [k, v] : e.values) args[k] = v;
    switch (e.phase) {
      case trace_phase::span:
        o["dur"] = e.dur_us;
        break;
      case trace_phase::flow_start:
      case trace_phase::flow_step:
        o["id"] = e.id;
        break;
      case trace_phase::flow_end:
        o["id"] = e.id;
        o["bp"] = "e";  // bind to the enclosing slice (the consuming step)
        break;
      case trace_phase::instant:
        o["s"] = "t";
        break;
      case trace_phase::counter:
        break;
    }
    if (!args.empty()) o["args"] = std::move(args);
    out.push_back(std::move(o));
  }
  json::object root;
  root["traceEvents"] = std::move(out);
  root["displayTimeUnit"] = "ms";
  root["otherData"] = {{"producer", "specpipe"}, {"dropped_events", dropped_}};
  os << json::serialize(root) << "\n";
}

void trace_buffer::write_file(const std::filesystem::path& path) {
  auto tmp = path;
  tmp += ".tmp";
  {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    if (!os) throw std::runtime_error("trace: cannot open '" + tmp.string() + "' for writing");
    write_json(os);
    os.flush();
    if (!os) throw std::runtime_error("trace: writing '" + tmp.string() + "' failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw std::runtime_error("trace: cannot move '" + tmp.string() + "' to '" + path.string() + "': " + ec.message());
}

}  // namespace specpipe
