// The Metaspace pre-tokenizer and decoder (Mistral and newer Llama-2 files
// use them instead of the Prepend/Replace normalizer). The spm fixture's
// vocabulary with its pipeline swapped; expected ids and text were produced by
// the `tokenizers` library (0.23) from the same JSON.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "model/tokenizer.hpp"

namespace specpipe {
namespace {

namespace json = boost::json;

tokenizer metaspace_tokenizer(const char* scheme, bool split) {
  const std::filesystem::path fixture = std::filesystem::path(SPECPIPE_TEST_DATA_DIR) / "tokenizers" / "spm";
  std::ifstream in(fixture / "tokenizer.json", std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  json::value doc = json::parse(s.str());
  json::object& root = doc.as_object();
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", scheme},
                           {"split", split}};
  root["decoder"] = {{"type", "Sequence"},
                     {"decoders", json::array{json::object{{"type", "ByteFallback"}},
                                              json::object{{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"},
                                                           {"prepend_scheme", scheme}, {"split", split}}}}};
  const std::filesystem::path dir =
      std::filesystem::path(testing::TempDir()) / (std::string("metaspace_") + scheme + (split ? "_split" : ""));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << json::serialize(doc);
  return tokenizer::load(dir / "tokenizer.json");
}

using ids = std::vector<std::int32_t>;

TEST(tokenizer_metaspace, prepend_first_without_split) {
  const tokenizer tok = metaspace_tokenizer("first", false);
  EXPECT_EQ(tok.encode("Hello world", false), (ids{446, 531, 312, 622, 374}));
  EXPECT_EQ(tok.encode("  two  spaces", false), (ids{328, 695, 312, 328, 554, 429, 355}));
  // After an added token the segment does not start the input: no prefix.
  EXPECT_EQ(tok.encode("<s>after bos", false), (ids{1, 298, 303, 433, 343, 570}));
  EXPECT_EQ(tok.encode("a </s> b", false), (ids{331, 328, 2, 343}));
  EXPECT_EQ(tok.encode("caf\u00e9 \u65e5", false), (ids{353, 298, 303, 198, 172, 328, 233, 154, 168}));

  EXPECT_EQ(tok.decode(ids{446, 531, 312, 622, 374}), "Hello world");
  EXPECT_EQ(tok.decode(ids{328, 695, 312, 328, 554, 429, 355}), " two  spaces");
  EXPECT_EQ(tok.decode(ids{331, 328, 2, 343}), "a  b");
  EXPECT_EQ(tok.decode(ids{353, 298, 303, 198, 172, 328, 233, 154, 168}), "caf\u00e9 \u65e5");
}

TEST(tokenizer_metaspace, prepend_always_with_split) {
  const tokenizer tok = metaspace_tokenizer("always", true);
  EXPECT_EQ(tok.encode("Hello world", false), (ids{446, 531, 312, 622, 374}));
  EXPECT_EQ(tok.encode("a </s> b", false), (ids{331, 328, 2, 343}));
}

}  // namespace
}  // namespace specpipe
