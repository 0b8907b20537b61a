// The tokenizer against the reference: tests/data/tokenizers/<name>/cases.json
// holds what the Hugging Face `tokenizers` library produced for tricky
// strings (tools/make_tokenizer_fixtures.py), and we must produce the same
// ids and the same decoded text.
#include "model/tokenizer.hpp"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace specpipe {
namespace {

namespace json = boost::json;

const std::filesystem::path fixtures = std::filesystem::path(SPECPIPE_TEST_DATA_DIR) / "tokenizers";

json::value read_json(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

std::vector<std::int32_t> ids_of(const json::value& v) {
  std::vector<std::int32_t> out;
  for (const json::value& x : v.as_array()) out.push_back(static_cast<std::int32_t>(x.as_int64()));
  return out;
}

struct reference_case {
  std::string text;
  std::vector<std::int32_t> ids;
  std::vector<std::int32_t> ids_no_special;
  std::string decoded;
  std::string decoded_keep_special;
};

std::vector<reference_case> load_cases(const std::string& name) {
  std::vector<reference_case> out;
  const json::value doc = read_json(fixtures / name / "cases.json");
  for (const json::value& c : doc.at("cases").as_array()) {
    out.push_back({std::string(c.at("text").as_string()), ids_of(c.at("ids")), ids_of(c.at("ids_no_special")),
                   std::string(c.at("decoded").as_string()), std::string(c.at("decoded_keep_special").as_string())});
  }
  return out;
}

std::string show(const std::vector<std::int32_t>& ids) {
  std::string s = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s + "]";
}

class tokenizer_reference : public ::testing::TestWithParam<std::string> {};

void expect_matches_reference(const tokenizer& tok, const std::vector<reference_case>& cases) {
  for (const reference_case& c : cases) {
    SCOPED_TRACE("text: \"" + c.text.substr(0, 80) + "\"");
    const std::vector<std::int32_t> with_bos = tok.encode(c.text, true);
    const std::vector<std::int32_t> without = tok.encode(c.text, false);
    EXPECT_EQ(with_bos, c.ids) << "ours " << show(with_bos) << "\nreference " << show(c.ids);
    EXPECT_EQ(without, c.ids_no_special) << "ours " << show(without) << "\nreference " << show(c.ids_no_special);
    EXPECT_EQ(tok.decode(c.ids, true), c.decoded);
    EXPECT_EQ(tok.decode(c.ids, false), c.decoded_keep_special);
    if (c.decoded == c.text) {
      EXPECT_EQ(tok.decode(tok.encode(c.text, false)), c.text);
    }
  }
}

TEST_P(tokenizer_reference, ids_and_text_match_the_tokenizers_library) {
  const tokenizer tok = tokenizer::load(fixtures / GetParam());
  const std::vector<reference_case> cases = load_cases(GetParam());
  ASSERT_GT(cases.size(), 40u);
  expect_matches_reference(tok, cases);
}

TEST_P(tokenizer_reference, vocab_size_counts_added_tokens) {
  const tokenizer tok = tokenizer::load(fixtures / GetParam() / "tokenizer.json");
  const json::value doc = read_json(fixtures / GetParam() / "cases.json");
  EXPECT_EQ(tok.vocab_size(), doc.at("vocab_size").as_int64());
}

TEST_P(tokenizer_reference, token_text_and_token_id_are_inverse) {
  const tokenizer tok = tokenizer::load(fixtures / GetParam());
  for (std::int32_t id = 0; id < tok.vocab_size(); ++id) {
    const auto back = tok.token_id(tok.token_text(id));
    ASSERT_TRUE(back.has_value()) << "id " << id;
    EXPECT_EQ(*back, id);
  }
  EXPECT_THROW((void)tok.token_text(tok.vocab_size()), std::out_of_range);
  EXPECT_THROW((void)tok.token_text(-1), std::out_of_range);
  EXPECT_FALSE(tok.token_id("no such token, surely").has_value());
}

// Merges stored as "a b" strings (tokenizers before 0.20) must load to the same
// tokenizer as the [a, b] pairs the fixtures use.
TEST_P(tokenizer_reference, legacy_string_merges_give_the_same_ids) {
  json::value doc = read_json(fixtures / GetParam() / "tokenizer.json");
  json::array& merges = doc.at("model").at("merges").as_array();
  ASSERT_FALSE(merges.empty());
  ASSERT_TRUE(merges[0].is_array());
  for (json::value& m : merges) {
    const json::array pair = m.as_array();
    m = json::string(std::string(pair[0].as_string()) + " " + std::string(pair[1].as_string()));
  }
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / ("legacy_merges_" + GetParam());
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << json::serialize(doc);
  std::filesystem::copy_file(fixtures / GetParam() / "tokenizer_config.json", dir / "tokenizer_config.json",
                             std::filesystem::copy_options::overwrite_existing);
  expect_matches_reference(tokenizer::load(dir), load_cases(GetParam()));
}

TEST_P(tokenizer_reference, invalid_utf8_input_round_trips_through_bytes) {
  const tokenizer tok = tokenizer::load(fixtures / GetParam());
  const std::string text = "ok \xFF\xFE bad \xE2\x82 cut";
  const std::vector<std::int32_t> ids = tok.encode(text, false);
  EXPECT_FALSE(ids.empty());
  // Both tokenizers keep every byte (byte-level symbols, or <0xNN> fallback).
  // The byte-level decoder repairs the bytes as from_utf8_lossy (one U+FFFD
  // per maximal invalid subpart: the truncated E2 82 is one); ByteFallback
  // puts one U+FFFD per byte token of a run that is not valid UTF-8.
  const std::string bad_cut = GetParam() == "spm" ? "\xEF\xBF\xBD\xEF\xBF\xBD" : "\xEF\xBF\xBD";
  EXPECT_EQ(tok.decode(ids), "ok \xEF\xBF\xBD\xEF\xBF\xBD bad " + bad_cut + " cut");
}

TEST_P(tokenizer_reference, encoding_is_repeatable) {
  tokenizer tok = tokenizer::load(fixtures / GetParam());
  const std::string text = "The same words, the same words, the same ids.";
  EXPECT_EQ(tok.encode(text), tok.encode(text));
  const tokenizer moved = std::move(tok);
  EXPECT_EQ(moved.decode(moved.encode(text, false)), text);
}

INSTANTIATE_TEST_SUITE_P(fixtures, tokenizer_reference, ::testing::Values("bytelevel", "spm"));

TEST(tokenizer_default_model, is_the_bytelevel_fixture) {
  const tokenizer tok = tokenizer::load(std::filesystem::path(SPECPIPE_SOURCE_DIR) / "models" / "default");
  EXPECT_EQ(tok.vocab_size(), 4096);
  expect_matches_reference(tok, load_cases("bytelevel"));
}

}  // namespace
}  // namespace specpipe
