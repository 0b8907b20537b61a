// `specpipe eval` as a user runs it, on the embedded model with tiny sizes:
// the JSON it writes, full agreeing with itself exactly, the heatmap, and
// clear errors (exit 2 for flags, exit 1 naming a bad file).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>

#include "apps/cli_runner.hpp"
#include "support/test_paths.hpp"

namespace specpipe::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class EvalCli : public ::testing::Test {
 protected:
  void SetUp() override {
    // A small book: the fixture's haystack paragraphs, twice (about a thousand tokens).
    const std::string text = slurp(test::test_data_dir() / "eval" / "haystack.txt");
    ASSERT_FALSE(text.empty());
    std::ofstream(text_path()) << text << "\n\n" << text;
  }
  fs::path text_path() const { return dir_.path() / "book.txt"; }
  std::string text_flag() const { return "--text '" + text_path().string() + "'"; }
  fs::path out(const std::string& name) const { return dir_.path() / name; }
  boost::json::value json(const std::string& name) const { return boost::json::parse(slurp(out(name))); }

  temp_dir dir_;
};

TEST_F(EvalCli, PerplexityJson) {
  const auto r = run_specpipe("eval ppl " + text_flag() + " --context 64 --tokens 16 --windows 2 --kv full --threads 2 "
                              "--json '" + out("ppl.json").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("perplexity"));
  EXPECT_THAT(r.out, HasSubstr("full"));
  EXPECT_THAT(r.err, HasSubstr("100%"));  // line-based progress when stderr is not a terminal
  const auto j = json("ppl.json");
  EXPECT_EQ(j.at("context").as_int64(), 64);
  EXPECT_EQ(j.at("tokens").as_int64(), 16);
  const auto& modes = j.at("modes").as_array();
  ASSERT_EQ(modes.size(), 1u);
  const auto& full = modes[0].as_object();
  EXPECT_EQ(full.at("mode").as_string(), "full");
  EXPECT_EQ(full.at("tokens_scored").as_int64(), 32);
  const double ppl = full.at("perplexity").to_number<double>();
  const double nll = full.at("mean_nll").to_number<double>();
  EXPECT_TRUE(std::isfinite(ppl));
  EXPECT_GT(ppl, 1.0);
  EXPECT_LT(ppl, 4096.0 * 4);  // not worse than far from uniform: the model has learned English
  EXPECT_NEAR(ppl, std::exp(nll), 1e-9 * ppl);
  ASSERT_EQ(full.at("texts").as_array().size(), 1u);
  EXPECT_EQ(full.at("texts").as_array()[0].at("windows").as_int64(), 2);
}

TEST_F(EvalCli, FullAgreesWithItselfExactly) {
  const auto r = run_specpipe("eval agree " + text_flag() + " --context 64 --tokens 16 --kv full --json '" +
                              out("agree.json").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("100.00%"));
  const auto j = json("agree.json");
  EXPECT_EQ(j.at("reference").as_string(), "full");
  const auto& m = j.at("modes").as_array().at(0).as_object();
  EXPECT_EQ(m.at("mode").as_string(), "full");
  EXPECT_EQ(m.at("positions").as_int64(), 16);
  EXPECT_EQ(m.at("greedy_agreed").as_int64(), 16);
  EXPECT_EQ(m.at("greedy_agreement").to_number<double>(), 1.0);
  EXPECT_EQ(m.at("mean_kl").to_number<double>(), 0.0);
  EXPECT_EQ(m.at("max_kl").to_number<double>(), 0.0);
}

// The quantized caches through the same commands: KIVI 1-bit moves the
// next-token distribution measurably; INT8 barely (it is near-lossless). A
// 320-token context, so that both caches have flushed groups out of their
// full-precision windows (KIVI after R + G = 128 tokens, hier after 2G = 256).
TEST_F(EvalCli, QuantizedModesDivergeAsExpected) {
  const auto r = run_specpipe("eval agree " + text_flag() + " --context 320 --tokens 16 --kv kivi:1,hier:8 --json '" +
                              out("q.json").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json("q.json");
  const auto& modes = j.at("modes").as_array();
  ASSERT_EQ(modes.size(), 2u);
  const double kl_kivi1 = modes.at(0).as_object().at("mean_kl").to_number<double>();
  const double kl_int8 = modes.at(1).as_object().at("mean_kl").to_number<double>();
  EXPECT_GT(kl_kivi1, 0.0);
  EXPECT_GE(kl_int8, 0.0);
  EXPECT_LT(kl_int8, kl_kivi1);
}

TEST_F(EvalCli, PasskeyJsonAndHeatmap) {
  const auto r = run_specpipe("eval passkey " + text_flag() + " --lengths 256,512 --depths 2 --samples 2 --kv full "
                              "--json '" + out("pk.json").string() + "' --plot '" + out("pk.svg").string() +
                              "' --documents '" + out("pk.jsonl").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("d=0%"));
  EXPECT_THAT(r.out, HasSubstr("d=100%"));
  const auto j = json("pk.json");
  EXPECT_EQ(j.at("lengths").as_array().size(), 2u);
  EXPECT_EQ(j.at("depths").as_array().size(), 2u);
  const auto& m = j.at("modes").as_array().at(0).as_object();
  EXPECT_EQ(m.at("mode").as_string(), "full");
  EXPECT_EQ(m.at("samples").as_int64(), 8);
  const auto& cells = m.at("cells").as_array();
  ASSERT_EQ(cells.size(), 4u);
  std::int64_t correct = 0;
  for (const auto& c : cells) {
    EXPECT_EQ(c.at("samples").as_int64(), 2);
    const double acc = c.at("accuracy").to_number<double>();
    EXPECT_GE(acc, 0.0);
    EXPECT_LE(acc, 1.0);
    correct += c.at("correct").as_int64();
  }
  EXPECT_EQ(correct, m.at("correct").as_int64());
  // What the model answered, one per cell, with the key it had to find.
  for (const auto& e : j.at("examples").as_array()) EXPECT_EQ(e.at("key").as_string().size(), 5u);
  const std::string svg = slurp(out("pk.svg"));
  EXPECT_THAT(svg, HasSubstr("<svg"));
  std::size_t n = 0;
  for (auto at = svg.find("<rect class=\"cell\""); at != std::string::npos; at = svg.find("<rect class=\"cell\"", at + 1))
    ++n;
  EXPECT_EQ(n, 4u);

  // --documents: one JSON line per document, enough to rerun it elsewhere.
  std::istringstream lines(slurp(out("pk.jsonl")));
  std::string line;
  std::int64_t docs = 0, docs_correct = 0;
  while (std::getline(lines, line)) {
    const auto d = boost::json::parse(line).as_object();
    const auto length = d.at("length").as_int64();
    EXPECT_TRUE(length == 256 || length == 512) << line.substr(0, 80);
    const auto prompt = d.at("prompt_ids").as_array().size(), answer = d.at("answer_ids").as_array().size();
    EXPECT_EQ(std::int64_t(prompt + answer + 1), length);
    const auto needle_at = d.at("needle_at").as_int64();
    EXPECT_GE(needle_at, 1);
    EXPECT_LT(needle_at, std::int64_t(prompt));
    const auto& full = d.at("answers").at("full").as_object();
    EXPECT_LE(full.at("ids").as_array().size(), answer + 1);
    docs_correct += full.at("correct").as_bool();
    ++docs;
  }
  EXPECT_EQ(docs, 8);
  EXPECT_EQ(docs_correct, correct);
}

TEST_F(EvalCli, BadFlagsAreUsageErrors) {
  struct bad { std::string args; const char* says; };
  const std::string t = text_flag();
  const bad cases[] = {
      {"eval ppl " + t + " --context 64 --tokens 16 --kv nosuch:2", "nosuch"},
      {"eval ppl " + t + " --context 64 --tokens 16 --kv kivi:3", "kivi stores 1, 2 or 4 bits"},
      {"eval ppl " + t + " --context 64 --tokens 16 --kv full,,full", "empty mode"},
      {"eval ppl " + t + " --context 64 --tokens 16 --kv full,full", "twice"},
      {"eval ppl " + t + " --context 64 --tokens 16 --kv full:4", "takes no bits"},
      {"eval ppl " + t + " --context 64 --tokens 16 --kv x:0", "bits"},
      {"eval ppl " + t + " --context 64 --tokens 16 --kv-bits 17", "--kv-bits"},
      {"eval ppl " + t + " --context 0 --tokens 16", "--context"},
      {"eval ppl " + t + " --context 64 --tokens -2", "--tokens"},
      {"eval ppl " + t + " --context 64", "tokens"},
      {"eval ppl " + t + " --context 8000 --tokens 500", "exceed"},
      {"eval ppl --context 64 --tokens 16", "--text"},
      {"eval ppl " + t + " --context 64 --tokens 16 --threads -1", "--threads"},
      {"eval ppl " + t + " --context 64 --tokens 16 --json /nonexistent/dir/x.json", "/nonexistent/dir"},
      {"eval agree " + t + " --context 64 --tokens 16 --windows 0", "--windows"},
      {"eval passkey " + t + " --lengths 1k,abc", "--lengths"},
      {"eval passkey " + t + " --lengths 16k", "exceeds"},
      {"eval passkey " + t + " --depths 0", "--depths"},
      {"eval passkey " + t + " --depths 0.5,1.5", "--depths"},
      {"eval passkey " + t + " --samples 0", "--samples"},
      {"eval passkey " + t + " --no-such-flag", "no-such-flag"},
      {"eval passkey " + t + " --documents /nonexistent/dir/d.jsonl", "--documents"},
      {"eval", "missing"},
      {"eval frobnicate", "unknown kind"},
  };
  for (const auto& c : cases) {
    const auto r = run_specpipe(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.says)) << c.args;
  }
}

TEST_F(EvalCli, BadTextFilesNameTheFile) {
  const auto missing = run_specpipe("eval ppl --text /nonexistent/book.txt --context 64 --tokens 16");
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
  EXPECT_THAT(missing.err, HasSubstr("/nonexistent/book.txt"));

  const fs::path tiny = out("tiny.txt");
  std::ofstream(tiny) << "Too short to hold a window.";
  const auto short_text = run_specpipe("eval agree --text '" + tiny.string() + "' --context 64 --tokens 16");
  EXPECT_EQ(short_text.exit_code, 1) << short_text.err;
  EXPECT_THAT(short_text.err, HasSubstr(tiny.string()));
  EXPECT_THAT(short_text.err, HasSubstr("tokens"));

  const auto short_hay = run_specpipe("eval passkey --text '" + tiny.string() + "' --lengths 256 --depths 1 --samples 1");
  EXPECT_EQ(short_hay.exit_code, 1) << short_hay.err;
  EXPECT_THAT(short_hay.err, HasSubstr("256"));

  const fs::path empty = out("empty.txt");
  std::ofstream{empty};
  const auto e = run_specpipe("eval ppl --text '" + empty.string() + "' --context 4 --tokens 2");
  EXPECT_EQ(e.exit_code, 1) << e.err;
  EXPECT_THAT(e.err, HasSubstr("empty"));
}

TEST(EvalCliHelp, ListsKindsAndFlags) {
  const auto top = run_specpipe("--help");
  EXPECT_THAT(top.out, HasSubstr("eval"));
  const auto r = run_specpipe("eval --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("passkey"));
  const auto p = run_specpipe("eval passkey --help");
  EXPECT_EQ(p.exit_code, 0);
  EXPECT_THAT(p.out, HasSubstr("--plot"));
  EXPECT_THAT(p.out, HasSubstr("--kv-bits"));
}

}  // namespace
}  // namespace specpipe::testing
