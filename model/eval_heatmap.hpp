#pragma once
// The needle-in-a-haystack figure as a standalone SVG: one panel per cache
// mode, context length along x, needle depth along y (0% = start of the
// document, at the top), each cell coloured by retrieval accuracy from red
// (0) through yellow (0.5) to green (1), with its value written in it, and
// one colour legend for all panels.
#include <cstdint>
#include <string>
#include <vector>

namespace specpipe {

struct heatmap_panel {
  std::string title;                  // the mode, e.g. "kivi:2"
  std::vector<std::int64_t> lengths;  // columns
  std::vector<double> depths;         // rows, fractions in [0, 1]
  std::vector<double> values;         // [depth][length], accuracy in [0, 1]; NaN = not measured
};

// "#rrggbb" for an accuracy in [0, 1] (clamped); NaN gives grey.
std::string heatmap_colour(double value);

// Throws std::invalid_argument when a panel's values do not match its axes.
std::string render_heatmap_svg(const std::vector<heatmap_panel>& panels, const std::string& title);

}  // namespace specpipe
