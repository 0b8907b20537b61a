// Trace buffer -> Chrome JSON -> parser -> summary, on hand-made timelines
// whose busy time, overlap and percentiles are known.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <sstream>
#include <tuple>

#include "actors/trace_buffer.hpp"
#include "actors/trace_summary.hpp"
#include "actors/trace_svg.hpp"

namespace specpipe::testing {
namespace {

trace_event span(const char* track, const char* name, const char* cat, double ts, double dur) {
  trace_event e;
  e.track = track;
  e.name = name;
  e.cat = cat;
  e.ts_us = ts;
  e.dur_us = dur;
  return e;
}

parsed_trace roundtrip(trace_buffer& b) {
  std::ostringstream os;
  b.write_json(os);
  return parse_trace_json(os.str(), "test");
}

TEST(TraceSummary, BusyTimeOverlapAndPercentiles) {
  trace_buffer b;
  // Compute: decode steps of 10, 20, ..., 100 us back to back from t=0.
  double t = 0;
  for (int i = 1; i <= 10; ++i) {
    b.add(span("worker 0", "decode", trace_cat::compute, t, 10.0 * i));
    t += 10.0 * i;
  }
  // Transfers: 100 us under compute, 50 us after the last step (t = 550).
  b.add(span("transfer", "gather", trace_cat::transfer, 100, 100));
  b.add(span("transfer", "gather", trace_cat::transfer, 600, 50));
  b.add_gpu_span(0, 1, "gemm", 0, 25);
  trace_event f;
  f.phase = trace_phase::flow_start;
  f.track = "planner";
  f.name = "topk";
  f.id = 9;
  f.ts_us = 5;
  b.add(f);
  const auto p = roundtrip(b);
  ASSERT_EQ(p.tracks.size(), 4u);
  EXPECT_EQ(p.tracks[0], "worker 0");
  EXPECT_EQ(p.tracks[2], "gpu 0 stream 1");
  const auto s = summarize(p);
  EXPECT_DOUBLE_EQ(s.tracks[0].busy_us, 550);
  EXPECT_DOUBLE_EQ(s.tracks[1].busy_us, 150);
  EXPECT_DOUBLE_EQ(s.transfer_us, 150);
  // The GPU span is compute too, but lies under the worker's spans already.
  EXPECT_DOUBLE_EQ(s.hidden_transfer_us, 100);
  EXPECT_NEAR(s.overlap_pct, 100.0 * 100 / 150, 1e-9);
  EXPECT_EQ(s.steps, 10);
  EXPECT_DOUBLE_EQ(s.step_p50_us, 50);
  EXPECT_DOUBLE_EQ(s.step_p90_us, 90);
  EXPECT_DOUBLE_EQ(s.step_p99_us, 100);
  EXPECT_EQ(s.flows, 1);
  EXPECT_DOUBLE_EQ(s.wall_us, 650);
  std::ostringstream table;
  print_summary(table, s);
  EXPECT_NE(table.str().find("overlap 66.7%"), std::string::npos) << table.str();
}

TEST(TraceSummary, ATransferTheWorkerWaitsForIsNotHidden) {
  trace_buffer b;
  // One 100 us step that waits 40 us (t = 30..70) for a gather of t = 20..70:
  // only 20..30 of the gather ran while the worker computed.
  b.add(span("worker 0", "decode", trace_cat::compute, 0, 100));
  b.add(span("worker 0", "wait rows", trace_cat::control, 30, 40));
  b.add(span("transfer", "gather", trace_cat::transfer, 20, 50));
  const auto s = summarize(roundtrip(b));
  EXPECT_DOUBLE_EQ(s.transfer_us, 50);
  EXPECT_DOUBLE_EQ(s.hidden_transfer_us, 10);
  EXPECT_DOUBLE_EQ(s.overlap_pct, 20);
}

TEST(TraceBuffer, WritesMetadataFlowsAndCounters) {
  trace_buffer b;
  b.add(span("scheduler", "step", trace_cat::control, 1, 2));
  trace_event c;
  c.phase = trace_phase::counter;
  c.track = "kv store";
  c.name = "host store";
  c.values = {{"bytes_used", 4096}};
  b.add(c);
  trace_event f;
  f.phase = trace_phase::flow_end;
  f.track = "scheduler";
  f.name = "topk";
  f.id = 3;
  f.ts_us = 2;
  b.add(f);
  std::ostringstream os;
  b.write_json(os);
  const auto root = boost::json::parse(os.str());
  int names = 0;
  bool flow_bound = false, counter = false;
  for (const auto& v : root.at("traceEvents").as_array()) {
    const auto& e = v.as_object();
    if (e.at("ph") == "M" && e.at("name") == "thread_name") ++names;
    if (e.at("ph") == "f") flow_bound = e.at("bp") == "e" && e.at("id").to_number<int>() == 3;
    if (e.at("ph") == "C") counter = e.at("args").at("bytes_used").to_number<double>() == 4096;
  }
  EXPECT_EQ(names, 2);
  EXPECT_TRUE(flow_bound);
  EXPECT_TRUE(counter);
}

TEST(TraceBuffer, CapsItsSize) {
  trace_buffer b(2);
  for (int i = 0; i < 5; ++i) b.add(span("worker 0", "decode", trace_cat::compute, i, 1));
  EXPECT_EQ(b.size(), 2u);
  EXPECT_EQ(b.dropped(), 3u);
}

TEST(TraceSummary, RejectsWhatIsNotATrace) {
  EXPECT_THROW(parse_trace_json("{", "bad.json"), std::runtime_error);
  EXPECT_THROW(parse_trace_json("{\"a\":1}", "bad.json"), std::runtime_error);
  try {
    parse_trace_json(R"({"traceEvents":[{"ph":"X","name":"a","ts":"soon"}]})", "bad.json");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json: event 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(percentile({}, 50), 0);
}

TEST(TraceSvg, OneLanePerTrackSpansAxisAndFlows) {
  trace_buffer b;
  b.add(span("worker 0", "decode", trace_cat::compute, 0, 1000));
  b.add(span("transfer", "gather <rows>", trace_cat::transfer, 200, 300));
  for (const auto& [ph, track, ts] : {std::tuple{trace_phase::flow_start, "planner", 100.0},
                                      std::tuple{trace_phase::flow_step, "transfer", 300.0},
                                      std::tuple{trace_phase::flow_end, "worker 0", 900.0}}) {
    trace_event f;
    f.phase = ph;
    f.track = track;
    f.name = "topk";
    f.id = 4;
    f.ts_us = ts;
    b.add(f);
  }
  const std::string svg = render_trace_svg(roundtrip(b));
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  for (const char* lane : {">worker 0<", ">transfer<", ">planner<"}) EXPECT_NE(svg.find(lane), std::string::npos) << lane;
  EXPECT_NE(svg.find("gather &lt;rows&gt;"), std::string::npos);  // names are escaped
  EXPECT_NE(svg.find(" ms</text>"), std::string::npos);
  std::size_t arrows = 0;
  for (std::size_t at = 0; (at = svg.find("marker-end", at)) != std::string::npos; ++at) ++arrows;
  EXPECT_EQ(arrows, 2u);
}

}  // namespace
}  // namespace specpipe::testing
