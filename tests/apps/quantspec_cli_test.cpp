// QuantSpec through the real binary: `generate --kv quantspec` prints what the
// target alone prints greedily, reports its counters and draft memory, traces
// its rounds; `eval accept` and `bench --kv quantspec` run small; bad flags
// are usage errors (exit 2).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <fstream>
#include <sstream>

#include "apps/cli_runner.hpp"
#include "memory/allocator.hpp"
#include "support/test_paths.hpp"

namespace specpipe::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::string prompt =
    "'The old house stood at the end of the lane, and every evening the children ran past it to the river. "
    "The old house stood at the end of the lane, and every evening the children ran past it to the river.'";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(QuantSpecCli, GreedyGenerateEqualsTheTargetOverInt8) {
  const auto target = run_specpipe("generate --prompt " + prompt + " -n 40 -t 0 --threads 2 --kv hier --group 32");
  const auto qs = run_specpipe("generate --prompt " + prompt + " -n 40 -t 0 --threads 2 --kv quantspec --group 32 "
                               "--gamma 4");
  ASSERT_EQ(target.exit_code, 0) << target.err;
  ASSERT_EQ(qs.exit_code, 0) << qs.err;
  EXPECT_EQ(qs.out, target.out);
  EXPECT_THAT(qs.err, HasSubstr("kv quantspec G=32 gamma 4"));
  EXPECT_THAT(qs.err, HasSubstr("decode 40 tokens"));
  EXPECT_THAT(qs.err, HasSubstr("[quantspec: drafts "));
  EXPECT_THAT(qs.err, HasSubstr("mean acceptance length"));
  EXPECT_THAT(qs.err, HasSubstr("[draft: 4-bit g128 projections, +"));
}

TEST(QuantSpecCli, SampledAutoGammaRunsAndTracesItsRounds) {
  temp_dir dir;
  const fs::path trace = dir.path() / "qs.json";
  const auto r = run_specpipe("generate --prompt " + prompt + " -n 24 -t 0.8 --seed 2 --threads 2 --kv quantspec "
                              "--gamma auto --trace '" + trace.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("gamma auto"));
  const std::string t = slurp(trace);
  EXPECT_THAT(t, HasSubstr("\"name\":\"draft\""));
  EXPECT_THAT(t, HasSubstr("\"name\":\"verify\""));
  const auto again = run_specpipe("generate --prompt " + prompt + " -n 24 -t 0.8 --seed 2 --threads 2 --kv quantspec "
                                  "--gamma auto");
  EXPECT_EQ(again.out, r.out);  // one seed, one output
}

TEST(QuantSpecCli, BadFlagsAreUsageErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"--kv quantspec --gamma 0", "--gamma: must be in [1, 16]"},
      {"--kv quantspec --gamma 17", "--gamma: must be in [1, 16]"},
      {"--kv quantspec --gamma many", "--gamma: 'many' is neither"},
      {"--kv quantspec --gamma 16 --group 8", "--gamma: 16 exceeds --group 8"},
      {"--kv quantspec --group 12", "--group: must be a multiple of 8"},
      {"--kv quantspec --kv-bits 4", "--kv-bits and --residual do not apply"},
      {"--kv quantspec --weight-group 3", "--weight-group: must be even"},
      {"--kv quantspec --device cuda --group 256", "--group: the GPU's hierarchical cache uses groups of 32, 64 or 128"},
      {"--kv hier --gamma 4", "apply to --kv quantspec only"},
      {"--kv speculative", "(or quantspec)"},
  };
  for (const auto& [flags, message] : cases) {
    const auto r = run_specpipe(std::string("generate --prompt x -n 2 ") + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << flags;
  }
}

TEST(QuantSpecCli, EvalAcceptWritesATableAndJson) {
  temp_dir dir;
  const fs::path book = dir.path() / "book.txt", json = dir.path() / "accept.json";
  const std::string text = slurp(test::test_data_dir() / "eval" / "haystack.txt");
  std::ofstream(book) << text << "\n\n" << text;
  const auto r = run_specpipe("eval accept --kv quantspec --gamma 1,3 --text '" + book.string() +
                              "' --context 48,96 --tokens 12 --threads 2 --json '" + json.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("kept% by position"));
  EXPECT_THAT(r.err, HasSubstr("eval accept"));
  const auto j = boost::json::parse(slurp(json));
  const auto& results = j.at("results").as_array();
  ASSERT_EQ(results.size(), 4u);  // 2 contexts x 2 gammas
  for (const auto& row : results) {
    const double rate = row.at("acceptance_rate").to_number<double>();
    EXPECT_GE(rate, 0.0);
    EXPECT_LE(rate, 1.0);
    EXPECT_GT(row.at("drafts").to_number<double>(), 0);
  }
  EXPECT_EQ(results[1].at("gamma").as_string(), "3");
  EXPECT_EQ(results[1].at("kept_by_position").as_array().size(), 3u);

  // The ablations: with the 16-bit weights and the INT8 read the draft is
  // the target itself, so greedy verification keeps every draft; each
  // approximation alone still runs and says which draft it measured.
  const auto same = run_specpipe("eval accept --gamma 3 --text '" + book.string() +
                                 "' --context 96 --tokens 12 --threads 2 --draft-weights 16 --draft-kv 8 --json '" +
                                 json.string() + "'");
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_THAT(same.out, HasSubstr("draft: 16-bit weights, INT8 KV"));
  const auto js = boost::json::parse(slurp(json));
  EXPECT_EQ(js.at("draft_weight_bits").as_int64(), 16);
  EXPECT_EQ(js.at("draft_kv_bits").as_int64(), 8);
  const auto& only = js.at("results").as_array().at(0);
  EXPECT_GT(only.at("draft_tokens").to_number<double>(), 0);
  EXPECT_EQ(only.at("accepted_tokens").to_number<double>(), only.at("draft_tokens").to_number<double>());
  EXPECT_DOUBLE_EQ(only.at("acceptance_rate").to_number<double>(), 1.0);
  for (const char* flags : {"--draft-weights 16", "--draft-kv 8"}) {
    const auto part = run_specpipe("eval accept --gamma 3 --text '" + book.string() +
                                   "' --context 96 --tokens 12 --threads 2 " + flags);
    ASSERT_EQ(part.exit_code, 0) << flags << ": " << part.err;
    EXPECT_THAT(part.out, HasSubstr(std::string(flags) == "--draft-kv 8" ? "4-bit weights g128, INT8 KV"
                                                                         : "16-bit weights, INT4 KV"));
  }
  for (const char* bad_flag : {"--draft-weights 8", "--draft-kv 2"}) {
    const auto bad_part = run_specpipe("eval accept --text '" + book.string() + "' --context 48 " + bad_flag);
    EXPECT_EQ(bad_part.exit_code, 2) << bad_flag;
    EXPECT_THAT(bad_part.err, HasSubstr(std::string(bad_flag).substr(0, std::string(bad_flag).find(' '))));
  }

  const auto bad = run_specpipe("eval accept --kv full --text '" + book.string() + "' --context 48");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("quantspec mode only"));
  const auto bad_gamma = run_specpipe("eval accept --gamma 2,2 --text '" + book.string() + "' --context 48");
  EXPECT_EQ(bad_gamma.exit_code, 2);
  EXPECT_THAT(bad_gamma.err, HasSubstr("listed twice"));
}

TEST(QuantSpecCli, BenchComparesWithAutoregressiveDecoding) {
  temp_dir dir;
  const fs::path json = dir.path() / "bench.json";
  const auto r = run_specpipe("bench --device cpu --preset tiny --kv full,quantspec --context 64 --repeats 2 "
                              "--warmup 1 --tokens 12 --acceptance 0.8 --json '" + json.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* kind : {"\nar ", "\ndraft ", "\nverify ", "\nquantspec ", "\ndecode "})
    EXPECT_THAT(r.out, HasSubstr(kind));
  EXPECT_THAT(r.out, HasSubstr("at acceptance 80% the measured costs give"));
  const auto j = boost::json::parse(slurp(json));
  bool found = false;
  for (const auto& p : j.at("points").as_array())
    if (p.at("kind").as_string() == "quantspec") {
      found = true;
      EXPECT_GT(p.at("tokens_per_s").to_number<double>(), 0);
      EXPECT_TRUE(p.as_object().contains("speedup_vs_ar"));
      EXPECT_TRUE(p.as_object().contains("speedup_at_assumed_acceptance"));
    }
  EXPECT_TRUE(found);

  // The GPU bench: rows for ar, target, draft, verify and the rounds; without
  // a device, a usage error that says so.
  const auto cuda = run_specpipe("bench --device cuda --preset tiny --kv quantspec --context 512 --gamma 3 "
                                 "--repeats 3 --warmup 1 --tokens 16 --acceptance 0.9");
  if (cuda_available()) {
    ASSERT_EQ(cuda.exit_code, 0) << cuda.err;
    for (const char* kind : {"ar ", "target ", "draft ", "verify ", "quantspec "})
      EXPECT_THAT(cuda.out, HasSubstr(std::string("\n") + kind)) << kind;
    EXPECT_THAT(cuda.out, HasSubstr("at acceptance 90%"));
  } else {
    EXPECT_EQ(cuda.exit_code, 2);
    EXPECT_THAT(cuda.err, HasSubstr("--device cuda"));
  }
  const auto stray = run_specpipe("bench --device cpu --preset tiny --gamma 4");
  EXPECT_EQ(stray.exit_code, 2);
  EXPECT_THAT(stray.err, HasSubstr("apply to --kv quantspec"));
}

TEST(CacheBenchCli, CpuBenchRunsTheCacheModesThroughThePipeline) {
  const auto r = run_specpipe("bench --device cpu --preset tiny --kv full,kivi:1,specache,specache-output "
                              "--context 160 --repeats 6 --group 16 --residual 16 --topk 4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("kivi 1-bit G=16 R=16 | dev"));
  EXPECT_THAT(r.out, HasSubstr("specache 1-bit G=16 R=16 k=4 | dev"));
  EXPECT_THAT(r.out, HasSubstr("prefetch=output | dev"));
  EXPECT_THAT(r.out, HasSubstr("hidden"));
  if (!cuda_available()) return;  // the GPU half below needs a device
  const auto gpu = run_specpipe("bench --device cuda --preset tiny --kv kivi:1,specache,specache-output "
                                "--context 600 --batch 1,2 --repeats 4 --warmup 2 --topk 16 --prefill-tokens 0");
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  // tiny's head_dim 64 keeps cpu order, where each row has its own attention block.
  EXPECT_THAT(gpu.out, HasSubstr("speculative prefetch (2 rows/seq, a block each)"));
  EXPECT_THAT(gpu.out, HasSubstr("output prefetch"));
  EXPECT_THAT(gpu.out, HasSubstr("MiB fetched per step"));
  EXPECT_THAT(gpu.out, HasSubstr("of the fetch hidden"));
  EXPECT_THAT(gpu.out, HasSubstr("; one eager step: layers "));  // the timeline's breakdown
  const auto bad = run_specpipe("bench --device cuda --preset tiny --kv specache --topk 4096");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--topk"));
}

}  // namespace
}  // namespace specpipe::testing
