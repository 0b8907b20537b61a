#include "model/tokenizer_added.hpp"

#include <algorithm>
#include <cctype>

#include "model/tokenizer_utf8.hpp"

namespace specpipe::tokenization {

namespace {

// The reference tests `\w` around single_word tokens; alphanumerics, '_' and
// any non-ASCII non-space character stand in for it here (cheap, and exact
// for ASCII text).
bool is_word_char_before(std::string_view text, std::size_t end) {
  if (end == 0) return false;
  std::size_t lead = end - 1;
  while (lead > 0 && (static_cast<unsigned char>(text[lead]) & 0xC0) == 0x80) --lead;
  const std::size_t n = utf8_char_length(text, lead);
  if (n == 0) return false;
  const char32_t cp = utf8_decode(text, lead, n);
  if (cp < 0x80) return std::isalnum(static_cast<int>(cp)) != 0 || cp == '_';
  return !is_unicode_whitespace(cp);
}

bool is_word_char_at(std::string_view text, std::size_t pos) {
  if (pos >= text.size()) return false;
  const std::size_t n = utf8_char_length(text, pos);
  if (n == 0) return false;
  const char32_t cp = utf8_decode(text, pos, n);
  if (cp < 0x80) return std::isalnum(static_cast<int>(cp)) != 0 || cp == '_';
  return !is_unicode_whitespace(cp);
}

bool is_space_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

added_token_matcher::added_token_matcher(const std::vector<added_token>& tokens) {
  for (const added_token& t : tokens) {
    if (!t.content.empty()) tokens_.push_back(t);
  }
  for (std::uint32_t i = 0; i < tokens_.size(); ++i) {
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  }
  for (auto& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](std::uint32_t a, std::uint32_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

const added_token* added_token_matcher::match_at(std::string_view text, std::size_t pos) const {
  for (const std::uint32_t i : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    const added_token& t = tokens_[i];
    if (text.compare(pos, t.content.size(), t.content) != 0) continue;
    if (t.single_word &&
        (is_word_char_before(text, pos) || is_word_char_at(text, pos + t.content.size()))) {
      continue;
    }
    return &t;
  }
  return nullptr;
}

void added_token_matcher::split(std::string_view text, std::vector<input_segment>& out) const {
  std::size_t plain_begin = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const added_token* t = by_first_byte_[static_cast<unsigned char>(text[pos])].empty() ? nullptr
                                                                                         : match_at(text, pos);
    if (t == nullptr) {
      ++pos;
      continue;
    }
    std::size_t begin = pos;
    std::size_t end = pos + t->content.size();
    if (t->lstrip) {
      while (begin > plain_begin && is_space_byte(text[begin - 1])) --begin;
    }
    if (t->rstrip) {
      while (end < text.size() && is_space_byte(text[end])) ++end;
    }
    if (begin > plain_begin) out.push_back({plain_begin, begin, -1});
    out.push_back({begin, end, t->id});
    plain_begin = pos = end;
  }
  if (plain_begin < text.size()) out.push_back({plain_begin, text.size(), -1});
}

}  // namespace specpipe::tokenization
