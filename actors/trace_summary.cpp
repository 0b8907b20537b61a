#include "actors/trace_summary.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace specpipe {
namespace {

namespace json = boost::json;

using interval = std::pair<double, double>;

std::vector<interval> merge(std::vector<interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<interval> out;
  for (const auto& iv : v) {
    if (!out.empty() && iv.first <= out.back().second) out.back().second = std::max(out.back().second, iv.second);
    else out.push_back(iv);
  }
  return out;
}

double length(const std::vector<interval>& merged) {
  double s = 0;
  for (const auto& [a, b] : merged) s += b - a;
  return s;
}

// `a` without the parts covered by `b` (both merged and sorted).
std::vector<interval> subtract(const std::vector<interval>& a, const std::vector<interval>& b) {
  std::vector<interval> out;
  std::size_t j = 0;
  for (auto [lo, hi] : a) {
    while (j < b.size() && b[j].second <= lo) ++j;
    for (std::size_t k = j; k < b.size() && b[k].first < hi; ++k) {
      if (b[k].first > lo) out.emplace_back(lo, b[k].first);
      lo = std::max(lo, b[k].second);
      if (lo >= hi) break;
    }
    if (lo < hi) out.emplace_back(lo, hi);
  }
  return out;
}

// Total length of the intersection of two merged interval lists.
double intersection(const std::vector<interval>& a, const std::vector<interval>& b) {
  double s = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) s += hi - lo;
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return s;
}

double number(const json::value& v) {
  if (v.is_double()) return v.as_double();
  if (v.is_int64()) return double(v.as_int64());
  if (v.is_uint64()) return double(v.as_uint64());
  throw std::runtime_error("not a number");
}

}  // namespace

parsed_trace parse_trace_json(const std::string& text, const std::string& origin) {
  json::value root;
  try {
    root = json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(origin + ": not valid JSON: " + e.what());
  }
  const json::array* events = nullptr;
  if (root.is_array()) events = &root.as_array();
  else if (root.is_object() && root.as_object().contains("traceEvents") && root.at("traceEvents").is_array())
    events = &root.at("traceEvents").as_array();
  if (!events) throw std::runtime_error(origin + ": expected a Chrome trace (an object with a traceEvents array)");

  parsed_trace t;
  std::map<std::int64_t, std::string> names;
  std::map<std::int64_t, std::int64_t> sort_index;
  auto tid_of = [](const json::object& o) -> std::int64_t {
    const auto* v = o.if_contains("tid");
    return v ? std::int64_t(number(*v)) : 0;
  };
  for (const auto& v : *events) {
    if (!v.is_object()) continue;
    const auto& o = v.as_object();
    const auto* ph = o.if_contains("ph");
    if (!ph || !ph->is_string() || o.if_contains("name") == nullptr || !o.at("name").is_string()) continue;
    if (*ph == "M") {
      const auto* args = o.if_contains("args");
      if (o.at("name") == "thread_name" && args && args->is_object() && args->as_object().contains("name"))
        names[tid_of(o)] = json::value_to<std::string>(args->at("name"));
      if (o.at("name") == "thread_sort_index" && args && args->is_object() && args->as_object().contains("sort_index"))
        sort_index[tid_of(o)] = std::int64_t(number(args->at("sort_index")));
    }
  }
  auto track = [&](const json::object& o) {
    const auto tid = tid_of(o);
    const auto it = names.find(tid);
    return it != names.end() ? it->second : "thread " + std::to_string(tid);
  };
  std::set<std::string> seen;
  std::vector<std::pair<std::int64_t, std::string>> order;
  bool first = true;
  std::size_t index = 0;
  for (const auto& v : *events) {
    ++index;
    if (!v.is_object()) continue;
    const auto& o = v.as_object();
    const auto* ph = o.if_contains("ph");
    if (!ph || !ph->is_string() || *ph == "M") continue;
    const std::string phase = json::value_to<std::string>(*ph);
    try {
      const double ts = number(o.at("ts"));
      const std::string tr = track(o);
      if (seen.insert(tr).second) {
        const auto si = sort_index.find(tid_of(o));
        order.emplace_back(si != sort_index.end() ? si->second : tid_of(o), tr);
      }
      const std::string name = o.contains("name") && o.at("name").is_string() ? json::value_to<std::string>(o.at("name")) : "";
      double end = ts;
      if (phase == "X") {
        parsed_span s{tr, name, o.contains("cat") ? json::value_to<std::string>(o.at("cat")) : "", ts,
                      o.contains("dur") ? number(o.at("dur")) : 0};
        end = ts + s.dur_us;
        t.spans.push_back(std::move(s));
      } else if (phase == "s" || phase == "t" || phase == "f") {
        t.flows.push_back({phase[0], std::uint64_t(number(o.at("id"))), tr, ts});
      } else if (phase == "C") {
        parsed_counter c{tr, name, ts, {}};
        if (const auto* a = o.if_contains("args"); a && a->is_object())
          for (const auto& kv : a->as_object()) c.values[std::string(kv.key())] = number(kv.value());
        t.counters.push_back(std::move(c));
      }
      if (first) t.t_begin_us = ts, t.t_end_us = end, first = false;
      t.t_begin_us = std::min(t.t_begin_us, ts);
      t.t_end_us = std::max(t.t_end_us, end);
    } catch (const std::exception& e) {
      throw std::runtime_error(origin + ": event " + std::to_string(index) + " (ph '" + phase + "'): " + e.what());
    }
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [k, name] : order) t.tracks.push_back(name);
  return t;
}

parsed_trace load_trace(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("trace: cannot open '" + path.string() + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_trace_json(ss.str(), path.string());
}

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  // Nearest rank: the smallest value with at least q% of the values <= it.
  const double rank = std::ceil(q / 100.0 * double(values.size()));
  const std::size_t i = rank < 1 ? 0 : std::min(values.size() - 1, std::size_t(rank) - 1);
  return values[i];
}

trace_summary summarize(const parsed_trace& t) {
  trace_summary s;
  s.wall_us = t.t_end_us - t.t_begin_us;
  std::map<std::string, std::vector<interval>> per_track;
  std::vector<interval> compute, transfer, waits;
  std::vector<double> steps;
  std::map<std::string, std::int64_t> counts;
  for (const auto& sp : t.spans) {
    per_track[sp.track].emplace_back(sp.ts_us, sp.ts_us + sp.dur_us);
    ++counts[sp.track];
    if (sp.cat == trace_cat::compute) compute.emplace_back(sp.ts_us, sp.ts_us + sp.dur_us);
    if (sp.cat == trace_cat::transfer) transfer.emplace_back(sp.ts_us, sp.ts_us + sp.dur_us);
    if (sp.name == "wait rows") waits.emplace_back(sp.ts_us, sp.ts_us + sp.dur_us);
    // Steps: "decode" spans (compute on the CPU worker; control on the CUDA
    // generate track when GPU stream spans carry the compute).
    if ((sp.cat == trace_cat::compute || sp.cat == trace_cat::control) && sp.name == "decode")
      steps.push_back(sp.dur_us);
  }
  for (const auto& name : t.tracks) {
    track_summary ts{name, 0, 0, 0};
    if (const auto it = per_track.find(name); it != per_track.end()) {
      ts.busy_us = length(merge(it->second));
      ts.spans = counts[name];
    }
    ts.busy_share = s.wall_us > 0 ? ts.busy_us / s.wall_us : 0;
    s.tracks.push_back(ts);
  }
  // A compute span that waits for rows inside it (the worker blocked on a
  // transfer) hides nothing while it waits.
  const auto mt = merge(transfer), mc = subtract(merge(compute), merge(waits));
  s.transfer_us = length(mt);
  s.hidden_transfer_us = intersection(mt, mc);
  s.overlap_pct = s.transfer_us > 0 ? 100.0 * s.hidden_transfer_us / s.transfer_us : 0;
  s.steps = std::int64_t(steps.size());
  s.step_p50_us = percentile(steps, 50);
  s.step_p90_us = percentile(steps, 90);
  s.step_p99_us = percentile(steps, 99);
  std::set<std::uint64_t> ids;
  for (const auto& f : t.flows) ids.insert(f.id);
  s.flows = std::int64_t(ids.size());
  return s;
}

void print_summary(std::ostream& os, const trace_summary& s) {
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %12s %8s %8s\n", "track", "busy ms", "busy %", "spans");
  os << line;
  for (const auto& t : s.tracks) {
    std::snprintf(line, sizeof line, "%-28s %12.3f %7.1f%% %8lld\n", t.track.c_str(), t.busy_us / 1e3,
                  100.0 * t.busy_share, static_cast<long long>(t.spans));
    os << line;
  }
  std::snprintf(line, sizeof line, "\nwall %.3f ms | transfer %.3f ms, %.3f ms hidden under compute: overlap %.1f%%\n",
                s.wall_us / 1e3, s.transfer_us / 1e3, s.hidden_transfer_us / 1e3, s.overlap_pct);
  os << line;
  std::snprintf(line, sizeof line, "decode steps %lld | step time p50 %.3f ms, p90 %.3f ms, p99 %.3f ms | flows %lld\n",
                static_cast<long long>(s.steps), s.step_p50_us / 1e3, s.step_p90_us / 1e3, s.step_p99_us / 1e3,
                static_cast<long long>(s.flows));
  os << line;
}

}  // namespace specpipe
