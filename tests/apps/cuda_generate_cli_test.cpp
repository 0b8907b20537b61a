// `specpipe generate --device cuda` as a user runs it. With a GPU: greedy and
// sampled runs print the prompt, the continuation and the timing line, greedy
// text agrees with the CPU path for the first tokens, and a seed makes a
// sampled run repeatable. Without one (or in a build without CUDA) the
// command fails with a message that names CUDA, never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/cli_runner.hpp"
#include "memory/allocator.hpp"

namespace specpipe::testing {
namespace {

using ::testing::HasSubstr;

const std::string prompt = "The old man looked out over the sea and said that";

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(CudaGenerateCli, GreedyAndSampledRunsOnTheDefaultModel) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible (or a build without CUDA)";
  const auto g = run_specpipe("generate --device cuda --prompt '" + prompt + "' -n 24 --temperature 0");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_THAT(g.out, HasSubstr(prompt));
  EXPECT_GT(g.out.size(), prompt.size() + 2);
  EXPECT_THAT(g.err, HasSubstr("tok/s"));
  EXPECT_THAT(g.err, HasSubstr(", cuda | kv full"));
  // The first greedy tokens agree with the CPU backend (the whole-model
  // parity test checks four tokens of this prompt; three words here).
  const auto c3 = run_specpipe("generate --device cpu --prompt '" + prompt + "' -n 3 --temperature 0");
  const auto g3 = run_specpipe("generate --device cuda --prompt '" + prompt + "' -n 3 --temperature 0");
  ASSERT_EQ(c3.exit_code, 0) << c3.err;
  ASSERT_EQ(g3.exit_code, 0) << g3.err;
  EXPECT_EQ(g3.out, c3.out);
  const auto s1 = run_specpipe("generate --device cuda --prompt 'The sea' -n 16 --temperature 0.9 --top-p 0.95 --seed 7");
  const auto s2 = run_specpipe("generate --device cuda --prompt 'The sea' -n 16 --temperature 0.9 --top-p 0.95 --seed 7");
  ASSERT_EQ(s1.exit_code, 0) << s1.err;
  EXPECT_EQ(s1.out, s2.out);
  EXPECT_THAT(s1.err, HasSubstr("decode"));
}

// Every quantized cache on the GPU: the timing line names the mode; a short
// greedy run (nothing quantized yet: the window holds the whole sequence)
// prints what the CPU path prints over the same mode; a 200-token run, which
// flushes groups along the way, completes.
TEST(CudaGenerateCli, QuantizedCachesRunOnTheDefaultModel) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible (or a build without CUDA)";
  for (const std::string kv : {"kivi --kv-bits 2", "kivi --kv-bits 1", "hier --kv-bits 4", "hier --kv-bits 8"}) {
    SCOPED_TRACE(kv);
    const auto g3 = run_specpipe("generate --device cuda --kv " + kv + " --prompt '" + prompt + "' -n 3 --temperature 0");
    const auto c3 = run_specpipe("generate --device cpu --kv " + kv + " --prompt '" + prompt + "' -n 3 --temperature 0");
    ASSERT_EQ(g3.exit_code, 0) << g3.err;
    ASSERT_EQ(c3.exit_code, 0) << c3.err;
    EXPECT_EQ(g3.out, c3.out);
    EXPECT_THAT(g3.err, ::testing::AnyOf(HasSubstr("kivi"), HasSubstr("specache"), HasSubstr("hier")));
    const auto g = run_specpipe("generate --device cuda --kv " + kv + " --prompt '" + prompt +
                                "' -n 200 --ignore-eos --temperature 0");
    ASSERT_EQ(g.exit_code, 0) << g.err;
    EXPECT_THAT(g.err, HasSubstr("tok/s"));
  }
}

// QuantSpec on the GPU: greedy text equals the target alone (INT8 KV,
// 16-bit weights) for a short run, the counters and the draft's memory are
// printed, and a long sampled run with an adaptive gamma completes.
TEST(CudaGenerateCli, QuantSpecRunsOnTheDefaultModel) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible (or a build without CUDA)";
  const auto q = run_specpipe("generate --device cuda --kv quantspec --gamma 4 --prompt '" + prompt +
                              "' -n 16 --temperature 0");
  const auto t = run_specpipe("generate --device cuda --kv hier --kv-bits 8 --group 128 --prompt '" + prompt +
                              "' -n 16 --temperature 0");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(q.out, t.out);
  EXPECT_THAT(q.err, HasSubstr("quantspec G=128 gamma 4"));
  EXPECT_THAT(q.err, HasSubstr("accepted"));
  EXPECT_THAT(q.err, HasSubstr("quantized on the GPU"));
  // The draft with its own 4-bit lm_head: greedy rounds still give the target's tokens.
  const auto h = run_specpipe("generate --device cuda --kv quantspec --gamma 4 --draft-lm-head --prompt '" + prompt +
                              "' -n 16 --temperature 0");
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_EQ(h.out, t.out);
  EXPECT_THAT(h.err, HasSubstr("lm_head 4-bit too"));
  const auto s = run_specpipe("generate --device cuda --kv quantspec --gamma auto --prompt '" + prompt +
                              "' -n 300 --ignore-eos --temperature 0.8 --seed 3");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_THAT(s.err, HasSubstr("tok/s"));
}

// --trace on the GPU path: the prefill and token spans, and QuantSpec's draft
// and verify span per round, in a file that `trace summary` reads.
TEST(CudaGenerateCli, TraceHasStepsAndQuantSpecRounds) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible (or a build without CUDA)";
  temp_dir dir;
  const auto plain = dir.path() / "plain.json", qs = dir.path() / "qs.json";
  const auto p = run_specpipe("generate --device cuda --prompt '" + prompt + "' -n 8 --ignore-eos --temperature 0 --trace '" +
                              plain.string() + "'");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const std::string pt = slurp(plain);
  EXPECT_THAT(pt, HasSubstr("\"name\":\"prefill\""));
  EXPECT_THAT(pt, HasSubstr("\"name\":\"decode\""));
  const auto ps = run_specpipe("trace summary '" + plain.string() + "'");
  ASSERT_EQ(ps.exit_code, 0) << ps.err;
  EXPECT_THAT(ps.out, HasSubstr("decode steps 7"));  // 8 tokens: the first comes from the prefill
  EXPECT_THAT(pt, HasSubstr("cuda worker 0"));
  const auto q = run_specpipe("generate --device cuda --kv quantspec --gamma 4 --prompt '" + prompt +
                              "' -n 24 --temperature 0 --trace '" + qs.string() + "'");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_THAT(q.err, HasSubstr("[trace: "));
  const std::string qt = slurp(qs);
  EXPECT_THAT(qt, HasSubstr("\"name\":\"draft\""));
  EXPECT_THAT(qt, HasSubstr("\"name\":\"verify\""));
  EXPECT_THAT(qt, HasSubstr("\"accepted\""));
  const auto s = run_specpipe("trace summary '" + qs.string() + "'");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_THAT(s.out, HasSubstr("cuda worker 0"));
}

// SpeCache on the GPU: with a top-k covering the context every packed row
// is read in 16 bits, so greedy output equals the full cache's; both
// prefetch modes run a long generation (many flushes) and report what they
// fetched; a top-k the GPU cannot fetch is refused.
TEST(CudaGenerateCli, SpeCacheRunsOnTheGpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible (or a build without CUDA)";
  const std::string p = "generate --device cuda --prompt '" + prompt + "' -n 40 --ignore-eos --temperature 0";
  const auto full = run_specpipe(p);
  ASSERT_EQ(full.exit_code, 0) << full.err;
  for (const std::string prefetch : {"speculative", "output"}) {
    SCOPED_TRACE(prefetch);
    const auto all = run_specpipe(p + " --kv specache --topk 1024 --group 32 --residual 16 --prefetch " + prefetch);
    ASSERT_EQ(all.exit_code, 0) << all.err;
    EXPECT_EQ(all.out, full.out);
    const auto g = run_specpipe("generate --device cuda --kv specache --topk 8 --prefetch " + prefetch +
                                " --prompt '" + prompt + "' -n 200 --ignore-eos --temperature 0");
    ASSERT_EQ(g.exit_code, 0) << g.err;
    EXPECT_THAT(g.err, HasSubstr("specache (GPU, " + prefetch + " prefetch, top-k 8)"));
    EXPECT_THAT(g.err, HasSubstr("KiB fetched per step"));
    if (prefetch == "speculative") {
      EXPECT_THAT(g.err, HasSubstr("rows, against this step's own attention"));
    }
  }
  // The trace: every layer on the compute stream, its top-k and fetch on
  // theirs. Speculative fetches run under later layers; the output
  // ablation's run inside a layer that waits for them.
  temp_dir dir;
  double overlap[2] = {-1, -1};
  for (int i = 0; i < 2; ++i) {
    const std::string prefetch = i == 0 ? "speculative" : "output";
    const auto file = dir.path() / (prefetch + ".json");
    const auto g = run_specpipe("generate --device cuda --kv specache --topk 8 --prefetch " + prefetch + " --prompt '" +
                                prompt + "' -n 120 --ignore-eos --temperature 0 --trace '" + file.string() + "'");
    ASSERT_EQ(g.exit_code, 0) << g.err;
    const std::string t = slurp(file);
    EXPECT_THAT(t, HasSubstr("cuda 0 transfer"));
    EXPECT_THAT(t, HasSubstr("\"name\":\"fetch\""));
    const auto sum = run_specpipe("trace summary '" + file.string() + "'");
    ASSERT_EQ(sum.exit_code, 0) << sum.err;
    EXPECT_THAT(sum.out, HasSubstr("decode steps 119"));
    const auto at = sum.out.find("overlap ");
    ASSERT_NE(at, std::string::npos) << sum.out;
    overlap[i] = std::stod(sum.out.substr(at + 8));
  }
  EXPECT_GT(overlap[0], 0) << "speculative fetches overlap compute";
  EXPECT_LT(overlap[1], overlap[0]) << "the output ablation waits for its fetches";
  const auto bad = run_specpipe("generate --device cuda --kv specache --topk 2000 --prompt hi -n 2");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--topk"));
}

TEST(CudaGenerateCli, QuantizedCacheGroupsTheGpuCannotReadAreRefused) {
  const auto r = run_specpipe("generate --device cuda --kv kivi --group 16 --prompt hi -n 2");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--group"));
}

TEST(CudaGenerateCli, WithoutADeviceSaysSo) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is visible";
  const auto r = run_specpipe("generate --device cuda --prompt hi -n 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.err;
  EXPECT_THAT(r.err, ::testing::AnyOf(HasSubstr("CUDA"), HasSubstr("cuda")));
}

}  // namespace
}  // namespace specpipe::testing
