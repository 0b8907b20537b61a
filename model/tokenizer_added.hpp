#pragma once
// Added tokens (tokenizer.json "added_tokens"): matched literally in the raw
// input before normalization and pre-tokenization, leftmost first and the
// longest at a position, as the reference's Aho-Corasick (leftmost-longest)
// does. single_word, lstrip and rstrip are honoured: a single_word token only
// matches between non-word characters, and lstrip / rstrip make the token
// absorb the whitespace on its left / right.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace specpipe::tokenization {

struct added_token {
  std::string content;
  std::int32_t id = 0;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
};

// A piece of the input: either plain text [begin, end) or an added token.
struct input_segment {
  std::size_t begin;
  std::size_t end;
  std::int32_t token;  // -1 for plain text
};

class added_token_matcher {
 public:
  added_token_matcher() = default;
  explicit added_token_matcher(const std::vector<added_token>& tokens);

  // Covers `text` with segments in order; plain segments are never empty.
  void split(std::string_view text, std::vector<input_segment>& out) const;
  bool empty() const { return tokens_.empty(); }

 private:
  // Which token (if any) matches at `pos`: the longest that fits its rules.
  const added_token* match_at(std::string_view text, std::size_t pos) const;
  std::vector<added_token> tokens_;
  std::array<std::vector<std::uint32_t>, 256> by_first_byte_;  // indices, longest first
};

}  // namespace specpipe::tokenization
