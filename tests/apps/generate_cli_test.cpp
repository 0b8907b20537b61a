// `specpipe generate` as a user runs it: good runs print text and a timing
// line; bad flags and bad model files give a clear error and a non-zero exit,
// never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "apps/cli_runner.hpp"

namespace specpipe::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string model_flag(const fs::path& dir) { return "--model '" + dir.string() + "'"; }

TEST(GenerateCli, DefaultModelPrintsTextAndTiming) {
  const auto r = run_specpipe("generate --prompt 'It was a dark and stormy night' -n 8 --temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("It was a dark and stormy night"));
  EXPECT_GT(r.out.size(), std::string("It was a dark and stormy night").size());
  EXPECT_THAT(r.err, HasSubstr("tok/s"));
  EXPECT_THAT(r.err, HasSubstr("decode"));
}

TEST(GenerateCli, GreedyIsDeterministicAndSeedMatters) {
  const auto a = run_specpipe("generate --prompt 'The sea' -n 12 --temperature 0");
  const auto b = run_specpipe("generate --prompt 'The sea' -n 12 --temperature 0");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  const auto s1 = run_specpipe("generate --prompt 'The sea' -n 12 --temperature 1 --seed 7");
  const auto s2 = run_specpipe("generate --prompt 'The sea' -n 12 --temperature 1 --seed 7");
  ASSERT_EQ(s1.exit_code, 0) << s1.err;
  EXPECT_EQ(s1.out, s2.out);
}

TEST(GenerateCli, BadFlagsAreUsageErrors) {
  struct bad { const char* args; const char* says; };
  const bad cases[] = {
      {"generate --prompt hi --temperature -1", "temperature"},
      {"generate --prompt hi --top-p 0", "top_p"},
      {"generate --prompt hi --top-p 1.5", "top_p"},
      {"generate --prompt hi --max-tokens abc", "max-tokens"},
      {"generate --prompt hi --max-tokens -3", "max-tokens"},
      {"generate --prompt hi --device tpu", "--device"},
      {"generate --prompt hi --no-such-flag", "no-such-flag"},
      {"generate", "--prompt"},
      {"generate --prompt-file /nonexistent/prompt.txt", "prompt-file"},
      {"generate --prompt hi --gpu-memory 4", "--gpu-memory: applies to --device cuda"},
      {"generate --prompt hi --device cuda --gpu-memory -1", "--gpu-memory: must be >= 0"},
      // Checked before anything is allocated, so it says the same with or
      // without a GPU: the default model's weights alone exceed 1 MiB.
      {"generate --prompt hi --device cuda --gpu-memory 0.001", "--gpu-memory: this run needs"},
      {"generate --prompt hi --device cuda --kv quantspec --gpu-memory 0.001", "--gpu-memory: this run needs"},
  };
  for (const auto& c : cases) {
    const auto r = run_specpipe(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.says)) << c.args;
  }
}

TEST(GenerateCli, UnknownCommand) {
  const auto r = run_specpipe("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command"));
}

TEST(GenerateCli, PromptLongerThanContext) {
  const auto r = run_specpipe("generate --prompt 'one two three four five six seven eight nine ten' "
                              "--context 4 -n 2");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("context"));
}

TEST(GenerateCli, MissingModelDirectory) {
  const auto r = run_specpipe("generate --prompt hi --model /nonexistent/model");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/model"));
}

class DamagedModel : public ::testing::Test {
 protected:
  void SetUp() override { copy_model(default_model_dir(), dir_.path() / "m"); }
  fs::path m() const { return dir_.path() / "m"; }
  fs::path weights_file() const {
    for (const auto& e : fs::directory_iterator(m()))
      if (e.path().extension() == ".safetensors") return e.path();
    return {};
  }
  void write(const fs::path& p, const std::string& text) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  }
  temp_dir dir_;
};

TEST_F(DamagedModel, TruncatedSafetensors) {
  const auto w = weights_file();
  ASSERT_FALSE(w.empty());
  fs::resize_file(w, fs::file_size(w) / 2);
  const auto r = run_specpipe("generate --prompt hi " + model_flag(m()));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(w.filename().string()));
}

TEST_F(DamagedModel, ConfigMissingField) {
  write(m() / "config.json", R"({"model_type": "llama", "hidden_size": 256})");
  const auto r = run_specpipe("generate --prompt hi " + model_flag(m()));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("config.json"));
  EXPECT_THAT(r.err, HasSubstr("vocab_size"));
}

TEST_F(DamagedModel, ConfigNotJson) {
  write(m() / "config.json", "{ this is not json");
  const auto r = run_specpipe("generate --prompt hi " + model_flag(m()));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("config.json"));
}

TEST_F(DamagedModel, MalformedTokenizer) {
  write(m() / "tokenizer.json", R"({"model": {"type": "BPE", "vocab": 12}})");
  const auto r = run_specpipe("generate --prompt hi " + model_flag(m()));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("tokenizer.json"));
}

TEST_F(DamagedModel, HeaderLiesAboutSize) {
  const auto w = weights_file();
  ASSERT_FALSE(w.empty());
  std::fstream f(w, std::ios::in | std::ios::out | std::ios::binary);
  const unsigned char huge[8] = {0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0};
  f.write(reinterpret_cast<const char*>(huge), 8);
  f.close();
  const auto r = run_specpipe("generate --prompt hi " + model_flag(m()));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(w.filename().string()));
}

}  // namespace
}  // namespace specpipe::testing
