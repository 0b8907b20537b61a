// The decode loop's streaming rules: never show half a UTF-8 character or the
// beginning of what may become a stop string.
#include <gtest/gtest.h>

#include "model/forward.hpp"
#include "model/generator.hpp"
#include "model/model.hpp"

namespace specpipe {
namespace {

TEST(StreamSafePrefix, HoldsBackIncompleteUtf8) {
  const std::string euro = "\xE2\x82\xAC";  // U+20AC, three bytes
  EXPECT_EQ(stream_safe_prefix("ab" + euro, {}), 5u);
  EXPECT_EQ(stream_safe_prefix("ab" + euro.substr(0, 2), {}), 2u);
  EXPECT_EQ(stream_safe_prefix("ab" + euro.substr(0, 1), {}), 2u);
  const std::string smile = "\xF0\x9F\x98\x80";  // U+1F600, four bytes
  EXPECT_EQ(stream_safe_prefix(smile.substr(0, 3), {}), 0u);
  EXPECT_EQ(stream_safe_prefix(smile, {}), 4u);
}

TEST(StreamSafePrefix, HoldsBackTrailingReplacementCharacters) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(stream_safe_prefix("ab" + fffd, {}), 2u);
  EXPECT_EQ(stream_safe_prefix("ab" + fffd + fffd, {}), 2u);
  EXPECT_EQ(stream_safe_prefix("a" + fffd + "b", {}), 5u);  // settled: something followed it
}

TEST(StreamSafePrefix, HoldsBackPossibleStopStrings) {
  const std::vector<std::string> stop = {"\n\nUser:", "END"};
  EXPECT_EQ(stream_safe_prefix("hello", stop), 5u);
  EXPECT_EQ(stream_safe_prefix("hello\n", stop), 5u);
  EXPECT_EQ(stream_safe_prefix("hello\n\nUs", stop), 5u);
  EXPECT_EQ(stream_safe_prefix("the EN", stop), 4u);
  EXPECT_EQ(stream_safe_prefix("the E", stop), 4u);
  EXPECT_EQ(stream_safe_prefix("the X", stop), 5u);
  EXPECT_EQ(stream_safe_prefix("", stop), 0u);
  EXPECT_EQ(stream_safe_prefix("abc", {""}), 3u);  // an empty stop string holds nothing back
}

}  // namespace
}  // namespace specpipe

namespace specpipe {
namespace {

struct GeneratorOnDefaultModel : ::testing::Test {
  static void SetUpTestSuite() {
    m = new model(model::load(std::filesystem::path(SPECPIPE_SOURCE_DIR) / "models" / "default"));
  }
  static void TearDownTestSuite() {
    delete m;
    m = nullptr;
  }
  generation_result run(const generation_request& req, std::string* streamed = nullptr) {
    cpu_forward fwd(m->config, m->weights, 2);
    auto cache = make_full_cache(m->config, 256);
    return generate(fwd, *cache, m->tok, m->tok.eos_ids(), req, 256, [&](std::string_view d) {
      if (streamed) *streamed += d;
    });
  }
  static model* m;
};
model* GeneratorOnDefaultModel::m = nullptr;

TEST_F(GeneratorOnDefaultModel, StopStringCutsTheTextAndStreamAgrees) {
  generation_request req;
  req.prompt = m->tok.encode("The old man looked at the sea and", true);
  req.max_tokens = 24;
  req.sampling.temperature = 0;
  req.ignore_eos = true;
  std::string streamed;
  const auto full = run(req, &streamed);
  ASSERT_EQ(full.tokens.size(), 24u);
  EXPECT_EQ(full.finish_reason, "length");
  EXPECT_EQ(streamed, full.text);
  ASSERT_GT(full.text.size(), 12u);

  // Stop on a piece of what greedy decoding writes: the output ends right before it.
  const std::string stop = full.text.substr(full.text.size() / 2, 4);
  req.stop = {stop};
  streamed.clear();
  const auto cut = run(req, &streamed);
  EXPECT_EQ(cut.finish_reason, "stop");
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop)));
  EXPECT_EQ(streamed, cut.text);
  EXPECT_LT(cut.tokens.size(), full.tokens.size());
}

TEST_F(GeneratorOnDefaultModel, ZeroTokensAndBadRequests) {
  generation_request req;
  req.prompt = m->tok.encode("Hello", true);
  req.max_tokens = 0;
  const auto r = run(req);
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(r.finish_reason, "length");
  req.prompt = {};
  EXPECT_THROW(run(req), std::invalid_argument);
  req.prompt = {1, 99999};
  EXPECT_THROW(run(req), std::invalid_argument);
  req.prompt = std::vector<std::int32_t>(300, 5);
  EXPECT_THROW(run(req), std::invalid_argument);  // longer than the 256-token context
}

}  // namespace
}  // namespace specpipe
