// The passkey heatmap SVG: one coloured cell per (mode, length, depth), axes
// and legend labelled, colours on the red-yellow-green ramp.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "model/eval_heatmap.hpp"

namespace specpipe {
namespace {

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(EvalHeatmap, ColourRamp) {
  EXPECT_EQ(heatmap_colour(0), "#d73027");
  EXPECT_EQ(heatmap_colour(0.5), "#fee08b");
  EXPECT_EQ(heatmap_colour(1), "#1a9850");
  EXPECT_EQ(heatmap_colour(7), "#1a9850");
  EXPECT_EQ(heatmap_colour(std::nan("")), "#bdbdbd");
}

TEST(EvalHeatmap, CellsAxesAndLegend) {
  const heatmap_panel full{"full", {1024, 2048, 4096}, {0.0, 0.5, 1.0},
                           {1, 1, 0.5, 1, 0.75, 0, 1, 0.25, 0}};
  const heatmap_panel kivi{"kivi:2 <&>", {1024, 2048, 4096}, {0.0, 0.5, 1.0}, std::vector<double>(9, 0.0)};
  const std::string svg = render_heatmap_svg({full, kivi}, "passkey");
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "<rect class=\"cell\""), 18u);
  EXPECT_EQ(count(svg, "<g class=\"panel\""), 2u);
  // The cell for (2048 tokens, depth 50%) of the first panel: 75%, between yellow and green.
  const std::regex cell(R"re(<rect class="cell"[^>]*fill="(#[0-9a-f]{6})"[^>]*data-length="2048" data-depth="0.5" data-accuracy="0.75")re");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, cell)) << svg;
  EXPECT_EQ(m[1].str(), heatmap_colour(0.75));
  EXPECT_NE(svg.find("data-length=\"4096\" data-depth=\"1\" data-accuracy=\"0\""), std::string::npos);
  EXPECT_NE(svg.find(">context length (tokens)<"), std::string::npos);
  EXPECT_NE(svg.find(">needle depth<"), std::string::npos);
  EXPECT_NE(svg.find(">4k<"), std::string::npos);
  EXPECT_NE(svg.find(">50%<"), std::string::npos);
  EXPECT_NE(svg.find("class=\"legend\""), std::string::npos);
  EXPECT_NE(svg.find(">accuracy<"), std::string::npos);
  // Titles are escaped, so a mode name cannot break the document.
  EXPECT_NE(svg.find("kivi:2 &lt;&amp;&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("kivi:2 <&>"), std::string::npos);
}

TEST(EvalHeatmap, ValuesMustMatchAxes) {
  const heatmap_panel bad{"full", {1024, 2048}, {0.5}, {1.0}};
  EXPECT_THROW(render_heatmap_svg({bad}, "x"), std::invalid_argument);
}

}  // namespace
}  // namespace specpipe
