#pragma once
// A static SVG timeline of a Chrome trace, for people without a trace
// viewer at hand: one lane per track, spans as rectangles coloured by name
// (hover shows name and duration), a time axis in milliseconds, and flows as
// arrows from the top-k request through its transfer to the step that used it.
#include <string>

#include "actors/trace_summary.hpp"

namespace specpipe {

struct svg_options {
  int width = 1600;       // pixels, labels included
  int lane_height = 26;
  int label_width = 190;
};

std::string render_trace_svg(const parsed_trace& t, const svg_options& opts = {});

}  // namespace specpipe
