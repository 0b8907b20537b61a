#include "model/eval_heatmap.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace specpipe {
namespace {

constexpr int cell_w = 64, cell_h = 28;
constexpr int panel_left = 64, panel_top = 48, panel_right = 24, panel_bottom = 56;
constexpr int legend_w = 90, legend_bar_h = 160;

std::string xml_escape(const std::string& s) {
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

std::string length_label(std::int64_t n) {
  return n % 1024 == 0 ? std::to_string(n / 1024) + "k" : std::to_string(n);
}

std::string percent(double v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", v * 100);
  return buf;
}

}  // namespace

std::string heatmap_colour(double value) {
  if (std::isnan(value)) return "#bdbdbd";
  value = std::clamp(value, 0.0, 1.0);
  // Two linear segments: red #d73027 -> yellow #fee08b -> green #1a9850.
  const int lo[3] = {0xd7, 0x30, 0x27}, mid[3] = {0xfe, 0xe0, 0x8b}, hi[3] = {0x1a, 0x98, 0x50};
  const int* a = value < 0.5 ? lo : mid;
  const int* b = value < 0.5 ? mid : hi;
  const double t = value < 0.5 ? value * 2 : (value - 0.5) * 2;
  char buf[8];
  int rgb[3];
  for (int i = 0; i < 3; ++i) rgb[i] = int(std::lround(a[i] + t * (b[i] - a[i])));
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
  return buf;
}

std::string render_heatmap_svg(const std::vector<heatmap_panel>& panels, const std::string& title) {
  int width = 0, height = 0;
  for (const auto& p : panels) {
    if (p.values.size() != p.lengths.size() * p.depths.size())
      throw std::invalid_argument("heatmap panel '" + p.title + "': " + std::to_string(p.values.size()) +
                                  " values for " + std::to_string(p.depths.size()) + " depths x " +
                                  std::to_string(p.lengths.size()) + " lengths");
    width += panel_left + int(p.lengths.size()) * cell_w + panel_right;
    height = std::max(height, panel_top + int(p.depths.size()) * cell_h + panel_bottom);
  }
  height = std::max(height, panel_top + legend_bar_h + 40);
  width += legend_w;

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height + 24
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << width / 2 << "\" y=\"16\" text-anchor=\"middle\" font-size=\"14\">" << xml_escape(title)
      << "</text>\n";

  int x0 = 0;
  for (const auto& p : panels) {
    const int gx = x0 + panel_left, gy = panel_top + 8;
    const int gw = int(p.lengths.size()) * cell_w, gh = int(p.depths.size()) * cell_h;
    svg << "<g class=\"panel\" data-mode=\"" << xml_escape(p.title) << "\">\n"
        << "<text x=\"" << gx + gw / 2 << "\" y=\"" << gy - 8 << "\" text-anchor=\"middle\" font-size=\"12\">"
        << xml_escape(p.title) << "</text>\n";
    for (std::size_t r = 0; r < p.depths.size(); ++r) {
      const int y = gy + int(r) * cell_h;
      svg << "<text x=\"" << gx - 6 << "\" y=\"" << y + cell_h / 2 + 4 << "\" text-anchor=\"end\">"
          << percent(p.depths[r]) << "</text>\n";
      for (std::size_t c = 0; c < p.lengths.size(); ++c) {
        const double v = p.values[r * p.lengths.size() + c];
        const int x = gx + int(c) * cell_w;
        svg << "<rect class=\"cell\" x=\"" << x << "\" y=\"" << y << "\" width=\"" << cell_w << "\" height=\""
            << cell_h << "\" fill=\"" << heatmap_colour(v) << "\" stroke=\"white\" data-length=\"" << p.lengths[c]
            << "\" data-depth=\"" << p.depths[r] << "\" data-accuracy=\"" << (std::isnan(v) ? -1 : v)
            << "\"><title>" << xml_escape(p.title) << ", " << p.lengths[c] << " tokens, depth "
            << percent(p.depths[r]) << ": " << (std::isnan(v) ? "n/a" : percent(v)) << "</title></rect>\n"
            << "<text x=\"" << x + cell_w / 2 << "\" y=\"" << y + cell_h / 2 + 4 << "\" text-anchor=\"middle\">"
            << (std::isnan(v) ? "n/a" : percent(v)) << "</text>\n";
      }
    }
    for (std::size_t c = 0; c < p.lengths.size(); ++c)
      svg << "<text x=\"" << gx + int(c) * cell_w + cell_w / 2 << "\" y=\"" << gy + gh + 14
          << "\" text-anchor=\"middle\">" << length_label(p.lengths[c]) << "</text>\n";
    svg << "<text x=\"" << gx + gw / 2 << "\" y=\"" << gy + gh + 34
        << "\" text-anchor=\"middle\">context length (tokens)</text>\n"
        << "<text transform=\"translate(" << x0 + 14 << "," << gy + gh / 2
        << ") rotate(-90)\" text-anchor=\"middle\">needle depth</text>\n</g>\n";
    x0 += panel_left + gw + panel_right;
  }

  // Legend: the same colour ramp as the cells, 100% at the top.
  const int lx = x0 + 16, ly = panel_top + 8;
  svg << "<g class=\"legend\">\n<defs><linearGradient id=\"accuracy-ramp\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">"
      << "<stop offset=\"0\" stop-color=\"" << heatmap_colour(0) << "\"/>"
      << "<stop offset=\"0.5\" stop-color=\"" << heatmap_colour(0.5) << "\"/>"
      << "<stop offset=\"1\" stop-color=\"" << heatmap_colour(1) << "\"/></linearGradient></defs>\n"
      << "<text x=\"" << lx << "\" y=\"" << ly - 8 << "\">accuracy</text>\n"
      << "<rect x=\"" << lx << "\" y=\"" << ly << "\" width=\"16\" height=\"" << legend_bar_h
      << "\" fill=\"url(#accuracy-ramp)\" stroke=\"black\" stroke-width=\"0.5\"/>\n";
  for (const double v : {1.0, 0.5, 0.0})
    svg << "<text x=\"" << lx + 22 << "\" y=\"" << ly + int((1 - v) * legend_bar_h) + 4 << "\">" << percent(v)
        << "</text>\n";
  svg << "</g>\n</svg>\n";
  return svg.str();
}

}  // namespace specpipe
