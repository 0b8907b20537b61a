#include "actors/trace_svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>

namespace specpipe {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// A stable colour per span name: the same name is the same colour in every file.
std::string colour(const std::string& name) {
  const std::size_t h = std::hash<std::string>{}(name);
  char s[48];
  std::snprintf(s, sizeof s, "hsl(%zu,60%%,%zu%%)", h % 360, 45 + (h / 360) % 20);
  return s;
}

// 1, 2 or 5 times a power of ten, giving about `target` ticks over `range`.
double tick_step(double range, int target) {
  const double raw = range / std::max(target, 1);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

}  // namespace

std::string render_trace_svg(const parsed_trace& t, const svg_options& o) {
  const int top = 44, lanes = int(t.tracks.size());
  const int height = top + lanes * o.lane_height + 30;
  const double plot_w = double(o.width - o.label_width - 20);
  const double t0 = t.t_begin_us, wall = std::max(t.t_end_us - t.t_begin_us, 1.0);
  auto x_of = [&](double ts) { return double(o.label_width) + (ts - t0) / wall * plot_w; };
  std::map<std::string, int> lane;
  for (int i = 0; i < lanes; ++i) lane[t.tracks[std::size_t(i)]] = i;
  auto y_of = [&](const std::string& track) { return top + lane[track] * o.lane_height; };

  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << o.width << "\" height=\"" << height
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
     << "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"6\" markerHeight=\"6\" "
        "orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#333\"/></marker></defs>\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  // Time axis.
  const double step = tick_step(wall, 10);
  for (double tick = 0; tick <= wall + 1e-9; tick += step) {
    const double x = x_of(t0 + tick);
    os << "<line x1=\"" << x << "\" y1=\"" << top - 6 << "\" x2=\"" << x << "\" y2=\"" << top + lanes * o.lane_height
       << "\" stroke=\"#ddd\"/>\n<text x=\"" << x << "\" y=\"" << top - 10 << "\" text-anchor=\"middle\">" << tick / 1e3
       << " ms</text>\n";
  }
  // Lanes and their labels.
  for (int i = 0; i < lanes; ++i) {
    const int y = top + i * o.lane_height;
    os << "<rect x=\"0\" y=\"" << y << "\" width=\"" << o.width << "\" height=\"" << o.lane_height << "\" fill=\""
       << (i % 2 ? "#f7f7f7" : "#ffffff") << "\"/>\n<text x=\"6\" y=\"" << y + o.lane_height / 2 + 4 << "\">"
       << escape(t.tracks[std::size_t(i)]) << "</text>\n";
  }
  // Spans: nested ones (a step around its decodes) drawn thinner on top.
  std::vector<const parsed_span*> spans;
  for (const auto& s : t.spans) spans.push_back(&s);
  std::stable_sort(spans.begin(), spans.end(), [](const parsed_span* a, const parsed_span* b) { return a->dur_us > b->dur_us; });
  for (const parsed_span* s : spans) {
    const double x = x_of(s->ts_us), w = std::max(s->dur_us / wall * plot_w, 0.5);
    const bool inner = s->cat != "control";
    const int y = y_of(s->track) + (inner ? 6 : 2), h = o.lane_height - (inner ? 12 : 4);
    os << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << h << "\" fill=\""
       << colour(s->name) << "\" fill-opacity=\"" << (inner ? 0.95 : 0.35) << "\"><title>" << escape(s->track) << ": "
       << escape(s->name) << " " << s->dur_us / 1e3 << " ms</title></rect>\n";
  }
  // Flows: consecutive points of one id joined by arrows.
  std::map<std::uint64_t, std::vector<const parsed_flow*>> flows;
  for (const auto& f : t.flows) flows[f.id].push_back(&f);
  for (auto& [id, pts] : flows) {
    std::stable_sort(pts.begin(), pts.end(), [](const parsed_flow* a, const parsed_flow* b) { return a->ts_us < b->ts_us; });
    for (std::size_t i = 1; i < pts.size(); ++i)
      os << "<line x1=\"" << x_of(pts[i - 1]->ts_us) << "\" y1=\"" << y_of(pts[i - 1]->track) + o.lane_height / 2
         << "\" x2=\"" << x_of(pts[i]->ts_us) << "\" y2=\"" << y_of(pts[i]->track) + o.lane_height / 2
         << "\" stroke=\"#333\" stroke-width=\"1\" marker-end=\"url(#arrow)\"><title>flow " << id << "</title></line>\n";
  }
  os << "<text x=\"6\" y=\"" << height - 10 << "\" fill=\"#555\">" << t.spans.size() << " spans, " << flows.size()
     << " flows over " << wall / 1e3 << " ms</text>\n</svg>\n";
  return os.str();
}

}  // namespace specpipe
