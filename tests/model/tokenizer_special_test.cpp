// BOS / EOS discovery from the files beside tokenizer.json, added-token
// matching rules, and special tokens in decode.
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "model/tokenizer.hpp"

namespace specpipe {
namespace {

const std::filesystem::path fixtures = std::filesystem::path(SPECPIPE_TEST_DATA_DIR) / "tokenizers";

TEST(tokenizer_special, bytelevel_fixture_takes_bos_eos_from_tokenizer_config) {
  const tokenizer tok = tokenizer::load(fixtures / "bytelevel");
  ASSERT_TRUE(tok.bos_id().has_value());
  EXPECT_EQ(tok.token_text(*tok.bos_id()), "<|begin_of_text|>");
  ASSERT_EQ(tok.eos_ids().size(), 1u);
  EXPECT_EQ(tok.token_text(tok.eos_ids()[0]), "<|end_of_text|>");
  EXPECT_TRUE(tok.add_bos_default());
  EXPECT_TRUE(tok.is_special(*tok.bos_id()));
  EXPECT_FALSE(tok.is_special(*tok.token_id("the")));
  EXPECT_FALSE(tok.is_special(-3));
}

TEST(tokenizer_special, spm_fixture_reads_bos_as_an_object) {
  const tokenizer tok = tokenizer::load(fixtures / "spm" / "tokenizer.json");
  EXPECT_EQ(tok.bos_id(), std::optional<std::int32_t>(1));
  EXPECT_EQ(tok.eos_ids(), std::vector<std::int32_t>{2});
  EXPECT_TRUE(tok.add_bos_default());
}

class tokenizer_side_files : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(testing::TempDir()) / (std::string("tokenizer_side_") + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::filesystem::copy_file(fixtures / "bytelevel" / "tokenizer.json", dir_ / "tokenizer.json");
  }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::filesystem::path dir_;
};

TEST_F(tokenizer_side_files, template_alone_gives_bos) {
  const tokenizer tok = tokenizer::load(dir_);
  EXPECT_EQ(tok.bos_id(), tok.token_id("<|begin_of_text|>"));
  EXPECT_TRUE(tok.add_bos_default());
  EXPECT_TRUE(tok.eos_ids().empty());
}

TEST_F(tokenizer_side_files, generation_config_lists_extra_eos_ids) {
  const std::int32_t eot = *tokenizer::load(dir_).token_id("<|eot_id|>");
  const std::int32_t end = *tokenizer::load(dir_).token_id("<|end_of_text|>");
  write("tokenizer_config.json", R"({"eos_token": {"content": "<|end_of_text|>"}, "add_bos_token": false})");
  write("generation_config.json",
        "{\"bos_token_id\": 5, \"eos_token_id\": [" + std::to_string(end) + ", " + std::to_string(eot) + "]}");
  write("config.json", R"({"bos_token_id": 7, "eos_token_id": 9})");
  const tokenizer tok = tokenizer::load(dir_);
  EXPECT_EQ(tok.eos_ids(), (std::vector<std::int32_t>{end, eot, 9}));  // union, no repeats
  EXPECT_FALSE(tok.add_bos_default());
  // No bos_token in tokenizer_config: the template's BOS wins over the ids.
  EXPECT_EQ(tok.bos_id(), tok.token_id("<|begin_of_text|>"));
  EXPECT_EQ(tok.encode("hi", true).front(), *tok.bos_id());
  EXPECT_EQ(tok.encode("hi", false), tokenizer::load(dir_).encode("hi", false));
}

TEST_F(tokenizer_side_files, config_json_bos_without_template) {
  std::ifstream in(dir_ / "tokenizer.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t at = text.find("\"post_processor\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, std::string("\"post_processor\"").size(), "\"unused_post_processor\"");
  write("tokenizer.json", text);
  write("config.json", R"({"bos_token_id": 65, "eos_token_id": 66})");
  const tokenizer tok = tokenizer::load(dir_);
  EXPECT_EQ(tok.bos_id(), std::optional<std::int32_t>(65));
  EXPECT_EQ(tok.eos_ids(), std::vector<std::int32_t>{66});
  EXPECT_FALSE(tok.add_bos_default());  // nothing says to add it by default
  EXPECT_EQ(tok.encode("x", true).front(), 65);  // but the caller may
}

TEST(tokenizer_special, skip_special_drops_only_special_tokens) {
  const tokenizer tok = tokenizer::load(fixtures / "bytelevel");
  const std::vector<std::int32_t> ids = tok.encode("<|start_header_id|>user<|end_header_id|> hi<|eot_id|>");
  EXPECT_EQ(tok.decode(ids, false), "<|begin_of_text|><|start_header_id|>user<|end_header_id|> hi<|eot_id|>");
  EXPECT_EQ(tok.decode(ids, true), "user hi");
  // Out-of-range ids are skipped as the reference skips them.
  const std::vector<std::int32_t> bad = {-1, tok.vocab_size(), *tok.token_id("hi")};
  EXPECT_EQ(tok.decode(bad), "hi");
}

// Added-token rules on a hand-made tokenizer: longest match first, single_word,
// lstrip / rstrip.
TEST(tokenizer_special, added_token_matching_rules) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "tokenizer_added_rules";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << R"({
    "added_tokens": [
      {"id": 10, "content": "<a>", "special": true},
      {"id": 11, "content": "<a><b>", "special": true},
      {"id": 12, "content": "cat", "single_word": true},
      {"id": 13, "content": "[L]", "lstrip": true, "rstrip": true}
    ],
    "model": {"type": "BPE", "vocab": {" ": 0, "x": 1, "c": 2, "a": 3, "t": 4, "s": 5}, "merges": []}
  })";
  const tokenizer tok = tokenizer::load(dir);
  EXPECT_EQ(tok.encode("x<a><b>x", false), (std::vector<std::int32_t>{1, 11, 1}));
  EXPECT_EQ(tok.encode("<a>x", false), (std::vector<std::int32_t>{10, 1}));
  EXPECT_EQ(tok.encode("cat x", false), (std::vector<std::int32_t>{12, 0, 1}));
  EXPECT_EQ(tok.encode("cats", false), (std::vector<std::int32_t>{2, 3, 4, 5}));
  EXPECT_EQ(tok.encode("x  [L]  x", false), (std::vector<std::int32_t>{1, 13, 1}));
  EXPECT_EQ(tok.vocab_size(), 14);
  EXPECT_FALSE(tok.token_id("missing"));
}

}  // namespace
}  // namespace specpipe
