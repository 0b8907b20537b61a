// Malformed tokenizer files must raise model_error naming the file and the
// field, never crash or load half a tokenizer.
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/model_error.hpp"
#include "model/tokenizer.hpp"

namespace specpipe {
namespace {

using ::testing::HasSubstr;

// A minimal valid byte-level-free BPE: vocab a b c ab abc, two merges.
constexpr const char* good_model =
    R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}, "merges": ["a b", "ab c"]})";

class tokenizer_errors : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(testing::TempDir()) / (std::string("tokenizer_errors_") + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  // Loads and returns the model_error, failing the test if none is thrown.
  model_error load_error() {
    try {
      (void)tokenizer::load(dir_);
    } catch (const model_error& e) {
      return e;
    }
    ADD_FAILURE() << "no model_error";
    return model_error(dir_, "", "none");
  }
  std::filesystem::path dir_;
};

TEST_F(tokenizer_errors, minimal_file_loads_and_merges) {
  write("tokenizer.json", std::string("{") + good_model + "}");
  const tokenizer tok = tokenizer::load(dir_);
  EXPECT_EQ(tok.encode("abcab", false), (std::vector<std::int32_t>{4, 3}));
  EXPECT_FALSE(tok.bos_id().has_value());
  EXPECT_FALSE(tok.add_bos_default());
  EXPECT_EQ(tok.encode("abc", true), (std::vector<std::int32_t>{4}));  // no BOS to add
  // No decoder: token strings joined by spaces, as the reference does.
  EXPECT_EQ(tok.decode(std::vector<std::int32_t>{4, 3}), "abc ab");
}

TEST_F(tokenizer_errors, missing_file) {
  const model_error e = load_error();
  EXPECT_THAT(e.what(), HasSubstr("tokenizer.json"));
}

TEST_F(tokenizer_errors, not_json) {
  write("tokenizer.json", "{\"model\": [1, 2,");
  const model_error e = load_error();
  EXPECT_THAT(e.what(), HasSubstr("not valid JSON"));
  EXPECT_EQ(e.file().filename(), "tokenizer.json");
}

TEST_F(tokenizer_errors, missing_model) {
  write("tokenizer.json", R"({"version": "1.0"})");
  const model_error e = load_error();
  EXPECT_EQ(e.field(), "model");
  EXPECT_THAT(e.what(), HasSubstr("missing"));
}

TEST_F(tokenizer_errors, unknown_model_type) {
  write("tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  const model_error e = load_error();
  EXPECT_EQ(e.field(), "model.type");
  EXPECT_THAT(e.what(), HasSubstr("Unigram"));
}

TEST_F(tokenizer_errors, merge_with_unknown_token) {
  write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b", "a z"]}})");
  const model_error e = load_error();
  EXPECT_EQ(e.field(), "model.merges[1]");
  EXPECT_THAT(e.what(), HasSubstr("\"z\""));
}

TEST_F(tokenizer_errors, merge_whose_result_is_not_a_token) {
  write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]}})");
  const model_error e = load_error();
  EXPECT_EQ(e.field(), "model.merges[0]");
  EXPECT_THAT(e.what(), HasSubstr("\"ab\""));
}

TEST_F(tokenizer_errors, malformed_merge_entries) {
  write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}})");
  EXPECT_EQ(load_error().field(), "model.merges[0]");
  write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [7]}})");
  EXPECT_THAT(load_error().what(), HasSubstr("found an integer"));
  write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", 1]]}})");
  EXPECT_EQ(load_error().field(), "model.merges[0][1]");
}

TEST_F(tokenizer_errors, bad_regex) {
  write("tokenizer.json", std::string(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(\\p{L}+"},
      "behavior": "Isolated", "invert": false}, )") + good_model + "}");
  const model_error e = load_error();
  EXPECT_EQ(e.field(), "pre_tokenizer.pattern.Regex");
  EXPECT_THAT(e.what(), HasSubstr("bad regex"));
}

TEST_F(tokenizer_errors, wrong_field_types) {
  write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": ["a"], "merges": []}})");
  EXPECT_EQ(load_error().field(), "model.vocab");
  write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": "0"}, "merges": []}})");
  EXPECT_THAT(load_error().what(), HasSubstr("expected an integer, found a string"));
  write("tokenizer.json", std::string(R"({"added_tokens": [{"id": 9, "content": 5}], )") + good_model + "}");
  EXPECT_EQ(load_error().field(), "added_tokens[0].content");
  write("tokenizer.json", std::string(R"({"decoder": {"type": "ByteLevel"}, "normalizer": {"type": "Prepend", "prepend": 1}, )") +
                              good_model + "}");
  EXPECT_EQ(load_error().field(), "normalizer.prepend");
  write("tokenizer.json", std::string(R"({"model": 3})"));
  EXPECT_THAT(load_error().what(), HasSubstr("expected an object, found an integer"));
  write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})");
  EXPECT_THAT(load_error().what(), HasSubstr("outside"));
  write("tokenizer.json", std::string(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "byte_fallback": "yes"}})"));
  EXPECT_EQ(load_error().field(), "model.byte_fallback");
}

TEST_F(tokenizer_errors, unsupported_pipeline_steps) {
  write("tokenizer.json", std::string(R"({"normalizer": {"type": "NFKC"}, )") + good_model + "}");
  EXPECT_THAT(load_error().what(), HasSubstr("unsupported normalizer \"NFKC\""));
  write("tokenizer.json", std::string(R"({"pre_tokenizer": {"type": "BertPreTokenizer"}, )") + good_model + "}");
  EXPECT_EQ(load_error().field(), "pre_tokenizer.type");
  write("tokenizer.json", std::string(R"({"decoder": {"type": "WordPiece"}, )") + good_model + "}");
  EXPECT_EQ(load_error().field(), "decoder.type");
  write("tokenizer.json", std::string(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways"}, )") +
                              good_model + "}");
  EXPECT_EQ(load_error().field(), "pre_tokenizer.behavior");
}

TEST_F(tokenizer_errors, unk_token_not_in_vocab) {
  write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": "<unk>"}})");
  EXPECT_EQ(load_error().field(), "model.unk_token");
}

TEST_F(tokenizer_errors, bad_side_files_name_their_file) {
  write("tokenizer.json", std::string("{") + good_model + "}");
  write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  model_error e = load_error();
  EXPECT_EQ(e.file().filename(), "tokenizer_config.json");
  EXPECT_EQ(e.field(), "bos_token");
  write("tokenizer_config.json", R"({"add_bos_token": "true"})");
  EXPECT_EQ(load_error().field(), "add_bos_token");
  write("tokenizer_config.json", "{}");
  write("config.json", R"({"eos_token_id": [1, 99]})");
  e = load_error();
  EXPECT_EQ(e.file().filename(), "config.json");
  EXPECT_EQ(e.field(), "eos_token_id[1]");
  write("config.json", "not json");
  EXPECT_EQ(load_error().file().filename(), "config.json");
}

}  // namespace
}  // namespace specpipe
