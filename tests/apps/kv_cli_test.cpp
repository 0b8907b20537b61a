// The quantized KV caches through the real binary: `generate --kv ...` on the
// default model, `bench --memory-only` and the CPU decode bench's skipped points.
#include <gtest/gtest.h>

#include <string>

#include "apps/cli_runner.hpp"

namespace specpipe::testing {
namespace {

const std::string prompt =
    "'The old house stood at the end of the lane, and every evening the children ran past it to the river. "
    "The old house stood at the end of the lane, and every evening the children ran past it to the river. "
    "The old house stood at the end of the lane, and every evening the children ran past it to the river.'";

TEST(KvCli, HierInt8GreedyMatchesTheFullCacheAndKivi4Runs) {
  const auto full = run_specpipe("generate --prompt " + prompt + " -n 8 -t 0 --threads 2 --kv full");
  // G = 32: the 73-token prompt is mostly quantized (the 2G buffer holds < 64).
  const auto hier = run_specpipe("generate --prompt " + prompt + " -n 8 -t 0 --threads 2 --kv hier --kv-bits 8 --group 32");
  const auto kivi = run_specpipe("generate --prompt " + prompt + " -n 8 -t 0 --threads 2 --kv kivi --kv-bits 4");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  ASSERT_EQ(hier.exit_code, 0) << hier.err;
  ASSERT_EQ(kivi.exit_code, 0) << kivi.err;
  EXPECT_EQ(hier.out, full.out);
  EXPECT_NE(hier.err.find("kv hier INT8 G=32"), std::string::npos) << hier.err;
  EXPECT_NE(kivi.err.find("kv kivi 4-bit G=64 R=64"), std::string::npos) << kivi.err;
  EXPECT_NE(kivi.err.find("decode 8 tokens"), std::string::npos) << kivi.err;
}

TEST(KvCli, BadKvFlagsAreUsageErrors) {
  const auto r = run_specpipe("generate --prompt x --kv hier --kv-bits 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--kv-bits: hier reads 4"), std::string::npos) << r.err;
  for (const char* bad : {"--kv specache --kv-bits 4", "--kv specache --topk 0", "--kv specache --prefetch eager",
                          "--kv kivi --topk 8"}) {
    const auto s = run_specpipe(std::string("generate --prompt x ") + bad);
    EXPECT_EQ(s.exit_code, 2) << bad << ": " << s.err;
  }
  EXPECT_NE(run_specpipe("generate --prompt x --kv specache --prefetch eager").err.find("--prefetch: 'eager'"),
            std::string::npos);
}

TEST(KvCli, SpeCacheGeneratesThroughThePipelineInBothPrefetchModes) {
  for (const char* mode : {"speculative", "output"}) {
    const auto r = run_specpipe(std::string("generate --prompt \"It was a dark and stormy night\" -n 24 "
                                            "--temperature 0 --kv specache --group 16 --residual 16 --topk 8 "
                                            "--prefetch ") + mode);
    ASSERT_EQ(r.exit_code, 0) << mode << ": " << r.err;
    EXPECT_NE(r.err.find("kv specache 1-bit G=16 R=16 k=8"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("[specache: 23 steps | top-k hit rate"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("decode 24 tokens"), std::string::npos) << r.err;
  }
}

TEST(KvCli, MemoryOnlyBenchReportsSpeCacheAtAboutATenthOfFp16) {
  const auto r = run_specpipe("bench --memory-only --preset llama3-8b --context 32k --kv full,specache,kivi,hier --kv-bits 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 32640 packed tokens at 48 B per head and layer plus a 128-token f16 window:
  // (32640 * 48 + 128 * 512) / (32768 * 512) = 0.0973.
  const auto at = r.out.find("specache 1-bit G=64 R=64");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  EXPECT_NE(line.find(" 32768 "), std::string::npos) << line;
  EXPECT_NE(line.find(" 12752.0 "), std::string::npos) << line;  // bytes per token, amortized
  EXPECT_NE(line.find(" 398.50 "), std::string::npos) << line;   // MiB per sequence
  EXPECT_NE(line.find("0.0973x"), std::string::npos) << line;
  EXPECT_NE(r.out.find("full (fp16)"), std::string::npos);
}

TEST(KvCli, CpuDecodeBenchSaysWhyAPointWasSkipped) {
  // Several modes go through the actor pipeline's bench. Two tokens a
  // sequence: the first is not timed, so one step is left, and the point is
  // skipped with the count (not the message for sequences whose decodes
  // never overlapped).
  const auto r = run_specpipe("bench --device cpu --preset tiny --kv full,kivi:2 --context 64 --batch 1 --repeats 2 "
                              "--warmup 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("skipped: full: 1 token(s) decoded while every sequence decoded, 2 needed"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("never decoded at the same time"), std::string::npos) << r.out;
  const auto ok = run_specpipe("bench --device cpu --preset tiny --kv full,kivi:2 --context 64 --batch 1 --repeats 3 "
                               "--warmup 0");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.out.find("skipped"), std::string::npos) << ok.out;
}

}  // namespace
}  // namespace specpipe::testing
