// Split behaviours against the examples in the tokenizers documentation
// (SplitDelimiterBehavior, "the-final--countdown" split on "-").
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "model/tokenizer_pretokenizer.hpp"

namespace specpipe::tokenization {
namespace {

std::vector<std::string> cut(split_behavior behavior, bool invert = false, std::string_view pattern = "-",
                             bool literal = true) {
  const regex_pattern re(pattern, literal);
  std::vector<std::string_view> parts;
  split_by_regex("the-final--countdown", re, behavior, invert, parts);
  return {parts.begin(), parts.end()};
}

using strings = std::vector<std::string>;

TEST(tokenizer_split, behaviours_match_the_reference_documentation) {
  EXPECT_EQ(cut(split_behavior::removed), (strings{"the", "final", "countdown"}));
  EXPECT_EQ(cut(split_behavior::isolated), (strings{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(cut(split_behavior::merged_with_previous), (strings{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(cut(split_behavior::merged_with_next), (strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(cut(split_behavior::contiguous), (strings{"the", "-", "final", "--", "countdown"}));
}

TEST(tokenizer_split, invert_keeps_the_matches_as_words) {
  EXPECT_EQ(cut(split_behavior::removed, true, R"(\p{L}+)", false), (strings{"the", "final", "countdown"}));
}

TEST(tokenizer_split, regex_is_unicode_aware) {
  const regex_pattern re(R"(\p{L}+|\p{N}{1,3})", false);
  std::vector<std::string_view> parts;
  split_by_regex("\u00e9t\u00e9 12345 \u65e5\u672c", re, split_behavior::removed, true, parts);  // keep the matches
  EXPECT_EQ(strings(parts.begin(), parts.end()), (strings{"\u00e9t\u00e9", "123", "45", "\u65e5\u672c"}));
}

TEST(tokenizer_split, bad_pattern_throws_with_offset) {
  EXPECT_THROW(regex_pattern("[a-", false), std::invalid_argument);
}

}  // namespace
}  // namespace specpipe::tokenization
