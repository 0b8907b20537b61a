// `specpipe bench` on the CPU backend and `specpipe trace` on a trace written
// by `generate --trace`, as a user runs them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <fstream>
#include <sstream>

#include "apps/cli_runner.hpp"

namespace specpipe::testing {
namespace {

using ::testing::HasSubstr;

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(BenchCli, TinyPresetOnCpuPrintsTableAndJson) {
  temp_dir tmp;
  const auto json = tmp.path() / "bench.json";
  const auto r = run_specpipe("bench --preset tiny --device cpu --batch 1 --context 64,128 --repeats 3 --warmup 1 "
                              "--json '" + json.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_THAT(r.out, HasSubstr("decode"));
  EXPECT_THAT(r.out, HasSubstr("prefill"));
  const auto doc = boost::json::parse(slurp(json));
  ASSERT_TRUE(doc.is_object());
  EXPECT_FALSE(doc.as_object().at("points").as_array().empty());
}

// The CPU backend's decode attention alone: f32 and every packed format,
// SpeCache's mixed read, each against the f32 kernel of the same run.
TEST(BenchCli, CpuKernelsTimeEveryCacheFormat) {
  temp_dir tmp;
  const auto json = tmp.path() / "kernels.json";
  const auto r = run_specpipe("bench --device cpu --kernels --preset tiny --context 300 --repeats 2 --warmup 0 "
                              "--json '" + json.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  for (const char* row : {"f32 attention", "kivi 1-bit G=64", "specache 1-bit G=64, mixed_attention", "kivi 2-bit",
                          "kivi 4-bit", "hier INT4 G=128", "hier INT8 G=128"})
    EXPECT_THAT(r.out, HasSubstr(row));
  const auto doc = boost::json::parse(slurp(json));
  const auto& points = doc.as_object().at("points").as_array();
  ASSERT_EQ(points.size(), 8u) << r.out;
  int with_speedup = 0;
  for (const auto& p : points) {
    EXPECT_GT(p.as_object().at("median_ms").to_number<double>(), 0.0);
    with_speedup += p.as_object().contains("speedup_vs_f32");
  }
  EXPECT_EQ(with_speedup, 7);  // every row but the f32 baseline
}

TEST(BenchCli, BadFlagsAreUsageErrors) {
  struct bad { const char* args; const char* says; };
  const bad cases[] = {
      {"bench --preset nosuch --device cpu", "nosuch"},
      {"bench --preset tiny --device cpu --batch 0", "batch"},
      {"bench --preset tiny --device cpu --context x", "context"},
      {"bench --preset tiny --device gpu", "device"},
      {"bench --preset tiny --device cpu --max-batch", "--gpu-memory and --max-batch: the CUDA decode bench only"},
      {"bench --preset tiny --device cpu --gpu-memory 48", "the CUDA decode bench only"},
      {"bench --preset tiny --device cuda --gpu-memory -2", "--gpu-memory: must be >= 0"},
      {"bench --preset tiny --device cuda --max-batch --batch 4", "--max-batch and --batch are exclusive"},
      {"bench --device cuda --kernels --gemv-only --max-batch", "--max-batch: times decode steps"},
      {"bench --preset tiny --device cpu --gemv-only", "--gemv-only: needs --kernels"},
      {"bench --preset tiny --device cpu --attention-only", "--attention-only: needs --kernels"},
      {"bench --device cuda --kernels --gemv-only --attention-only", "are exclusive"},
      {"bench --preset tiny --device cuda --packed-order rows", "--packed-order: must be cpu or lane, got 'rows'"},
      {"bench --preset tiny --device cuda --packed-blocks 5", "--packed-blocks: must be 0 (the default), 3 or 4, got 5"},
      {"bench --preset tiny --device cuda --specache-blocks two", "--specache-blocks: must be auto, per-row or shared"},
      {"bench --preset tiny --device cpu --specache-blocks shared", "--specache-blocks: the CUDA decode bench only"},
      {"bench --device cpu --kernels --gather-only", "--gather-only and --gemv-only time CUDA kernels"},
      {"bench --device cpu --kernels --kv kivi", "--device cpu --kernels times every cache format; it takes no --kv"},
  };
  for (const auto& c : cases) {
    const auto r = run_specpipe(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.says)) << c.args;
  }
}

TEST(TraceCli, GenerateTraceThenSummaryAndRender) {
  temp_dir tmp;
  const auto trace = tmp.path() / "t.json";
  const auto svg = tmp.path() / "t.svg";
  const auto g = run_specpipe("generate --prompt 'Once upon a time' -n 6 --temperature 0 --trace '" +
                              trace.string() + "'");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const auto doc = boost::json::parse(slurp(trace));
  ASSERT_TRUE(doc.is_object() || doc.is_array());

  const auto s = run_specpipe("trace summary '" + trace.string() + "'");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_THAT(s.out, HasSubstr("scheduler"));

  const auto r = run_specpipe("trace render '" + trace.string() + "' -o '" + svg.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(slurp(svg), HasSubstr("<svg"));

  const auto bad = run_specpipe("trace summary /nonexistent/trace.json");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("/nonexistent/trace.json"));
}

}  // namespace
}  // namespace specpipe::testing
