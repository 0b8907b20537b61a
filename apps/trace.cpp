// `specpipe trace`: read a trace written by `generate --trace` (or any Chrome
// trace) and summarize it as a table, or render it as an SVG timeline.
#include <fstream>
#include <iostream>

#include "actors/trace_summary.hpp"
#include "actors/trace_svg.hpp"
#include "apps/cli_support.hpp"
#include "apps/commands.hpp"

namespace specpipe::apps {
namespace {

constexpr const char* usage_line =
    "usage: specpipe trace summary FILE\n"
    "       specpipe trace render FILE -o timeline.svg";

int trace_main(int argc, char** argv) {
  po::options_description desc("specpipe trace flags");
  std::string action, file, out;
  desc.add_options()
    ("help,h", "show this help")
    ("action", po::value(&action), "summary or render")
    ("file", po::value(&file), "the trace (Chrome Trace Event JSON)")
    ("output,o", po::value(&out), "render: the SVG file to write");
  po::positional_options_description pos;
  pos.add("action", 1).add("file", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).run(), vm);
    if (vm.count("help")) {
      std::cout << usage_line << "\n\n" << desc << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw usage_error(e.what());
  }
  if (action != "summary" && action != "render")
    throw usage_error(action.empty() ? "an action is required: summary or render"
                                     : "'" + action + "' is not an action (summary, render)");
  if (file.empty()) throw usage_error("a trace FILE is required");
  const parsed_trace t = load_trace(file);
  if (action == "summary") {
    print_summary(std::cout, summarize(t));
    return 0;
  }
  if (out.empty()) throw usage_error("render: -o FILE (the SVG to write) is required");
  std::ofstream os(out, std::ios::binary | std::ios::trunc);
  if (!os) throw std::runtime_error("-o: cannot open '" + out + "' for writing");
  os << render_trace_svg(t);
  if (!os.flush()) throw std::runtime_error("-o: writing '" + out + "' failed");
  std::cerr << "wrote " << out << " (" << t.tracks.size() << " tracks, " << t.spans.size() << " spans)\n";
  return 0;
}

}  // namespace

int run_trace(int argc, char** argv) { return guarded("trace", trace_main, argc, argv); }

}  // namespace specpipe::apps
