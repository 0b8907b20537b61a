// Passkey documents built in C++ against tools/passkey.py: id for id on
// prompts written by tools/make_passkey_fixture.py, the structure of the
// decoded text, the deterministic sampling and the scoring rule.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <fstream>
#include <set>
#include <sstream>

#include "model/eval_passkey.hpp"
#include "support/test_paths.hpp"

namespace specpipe {
namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::int32_t> ids_of(const boost::json::value& v) {
  std::vector<std::int32_t> out;
  for (const auto& x : v.as_array()) out.push_back(std::int32_t(x.as_int64()));
  return out;
}

class EvalPasskey : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = new tokenizer(tokenizer::load(test::default_model_dir())); }
  static void TearDownTestSuite() { delete tok_; }
  static tokenizer* tok_;
};
tokenizer* EvalPasskey::tok_ = nullptr;

TEST(EvalPasskeyText, FormatsAndScores) {
  EXPECT_EQ(passkey_text(passkey_needle_format, "48213"),
            "\nThe pass key is 48213. Remember it. 48213 is the pass key.\n");
  EXPECT_EQ(passkey_text(passkey_answer_format, "7"), " 7");
  EXPECT_TRUE(passkey_correct(" 48213.", "48213"));
  EXPECT_TRUE(passkey_correct("48213", "48213"));
  EXPECT_TRUE(passkey_correct("\n 48213 is", "48213"));
  EXPECT_FALSE(passkey_correct(" 482131", "48213"));
  EXPECT_FALSE(passkey_correct(" 4821", "48213"));
  EXPECT_FALSE(passkey_correct(" the 48213", "48213"));
  EXPECT_FALSE(passkey_correct("", "48213"));
}

TEST(EvalPasskeyText, NeedleOffsetRoundsHalfToEven) {
  // Python's round(): 1.5 -> 2, 2.5 -> 2.
  EXPECT_EQ(passkey_needle_offset(0.5, 3), 2);
  EXPECT_EQ(passkey_needle_offset(0.5, 5), 2);
  EXPECT_EQ(passkey_needle_offset(0.25, 10), 2);
  EXPECT_EQ(passkey_needle_offset(0.0, 77), 0);
  EXPECT_EQ(passkey_needle_offset(1.0, 77), 77);
}

TEST(EvalPasskeyText, KeysAndBoundedDraws) {
  std::mt19937_64 rng(5);
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const auto x = uniform_below(rng, 7);
    ASSERT_LT(x, 7u);
    seen.insert(x);
    const std::string key = passkey_random_key(rng, 5);
    ASSERT_EQ(key.size(), 5u) << key;
    ASSERT_NE(key[0], '0') << key;
  }
  EXPECT_EQ(seen.size(), 7u);
  EXPECT_THROW(uniform_below(rng, 0), std::invalid_argument);
}

TEST_F(EvalPasskey, MatchesToolsPasskeyIdForId) {
  const auto fixture = boost::json::parse(slurp(test::test_data_dir() / "eval" / "passkey_ref.json"));
  const auto hay_text = slurp(test::test_data_dir() / "eval" / "haystack.txt");
  const passkey_builder builder(*tok_);
  // The haystack as the Python tokenizer encoded it: also checks our encoder.
  const auto hay = builder.encode(hay_text);
  ASSERT_EQ(hay, ids_of(fixture.at("haystack_ids")));
  const auto& cases = fixture.at("cases").as_array();
  ASSERT_GE(cases.size(), 4u);
  for (const auto& c : cases) {
    const std::string key(c.at("key").as_string());
    const double depth = c.at("depth").to_number<double>();
    const auto length = c.at("prompt_length").as_int64();
    const auto doc = builder.assemble(hay, key, depth, length);
    EXPECT_EQ(doc.prompt, ids_of(c.at("prompt_ids"))) << "key " << key << " depth " << depth;
    EXPECT_EQ(doc.answer, ids_of(c.at("answer_ids"))) << "key " << key;
  }
}

TEST_F(EvalPasskey, DecodedDocumentHasTheFormatsStructure) {
  const passkey_builder builder(*tok_);
  const auto hay = builder.encode(slurp(test::test_data_dir() / "eval" / "haystack.txt"));
  for (const double depth : {0.0, 0.3, 1.0}) {
    const auto doc = builder.assemble(hay, "31415", depth, 240);
    ASSERT_EQ(doc.prompt.size(), 240u);
    ASSERT_TRUE(tok_->bos_id().has_value());
    EXPECT_EQ(doc.prompt.front(), *tok_->bos_id());
    const std::string text = tok_->decode(doc.prompt);
    const std::string needle = passkey_text(passkey_needle_format, "31415");
    const auto at = text.find(needle);
    ASSERT_NE(at, std::string::npos) << text;
    EXPECT_EQ(text.find(needle, at + 1), std::string::npos);
    EXPECT_TRUE(text.ends_with(passkey_question)) << text.substr(text.size() - 60);
    // The needle is the tokens at needle_at, and the haystack around it is contiguous book text.
    const std::vector<std::int32_t> needle_ids(doc.prompt.begin() + doc.needle_at,
                                               doc.prompt.begin() + doc.needle_at + doc.needle_tokens);
    EXPECT_EQ(needle_ids, builder.encode(needle));
    const std::int64_t m = 240 - 1 - doc.needle_tokens - std::int64_t(builder.question().size());
    EXPECT_EQ(doc.needle_at - 1, passkey_needle_offset(depth, m));
    if (depth == 0.0) {
      EXPECT_EQ(doc.needle_at, 1);
    }
    if (depth == 1.0) {
      EXPECT_EQ(doc.needle_at + doc.needle_tokens + std::int64_t(builder.question().size()), 240);
    }
    EXPECT_EQ(tok_->decode(doc.answer), " 31415");
  }
  EXPECT_THROW(builder.assemble(hay, "31415", 0.5, 10), std::invalid_argument);
  EXPECT_THROW(builder.assemble(std::span(hay).first(5), "31415", 0.5, 240), std::invalid_argument);
}

TEST_F(EvalPasskey, EvalSamplesAreDeterministicAndFitTheirLength) {
  const passkey_builder builder(*tok_);
  std::vector<haystack_book> books{{"short", builder.encode("A few words only.")},
                                   {"book", builder.encode(slurp(test::test_data_dir() / "eval" / "haystack.txt"))}};
  std::set<std::string> keys;
  for (int i = 0; i < 6; ++i) {
    const auto a = builder.eval_sample(books, 300, 1, 0.5, i, 7);
    const auto b = builder.eval_sample(books, 300, 1, 0.5, i, 7);
    EXPECT_EQ(a.key, b.key);
    EXPECT_EQ(a.prompt, b.prompt);
    EXPECT_EQ(a.prompt.size() + a.answer.size() + 1, 300u);
    EXPECT_EQ(a.key.size(), 5u);
    keys.insert(a.key);
  }
  EXPECT_GT(keys.size(), 1u);
  EXPECT_NE(builder.eval_sample(books, 300, 1, 0.5, 0, 7).key, builder.eval_sample(books, 300, 1, 0.5, 0, 8).key);
  EXPECT_THROW(builder.eval_sample(books, 100000, 0, 0.5, 0, 7), std::invalid_argument);
}

}  // namespace
}  // namespace specpipe
