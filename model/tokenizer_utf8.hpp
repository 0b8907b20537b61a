#pragma once
// UTF-8 helpers for the tokenizer: stepping over characters of possibly
// invalid input, encoding code points, and the lossy byte -> UTF-8 repair that
// Hugging Face decoders apply (Rust's String::from_utf8_lossy).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace specpipe::tokenization {

// Length of the well-formed UTF-8 character starting at s[i], or 0 when the
// bytes there are not one (a stray continuation byte, an overlong form, a
// surrogate, a truncated sequence).
std::size_t utf8_char_length(std::string_view s, std::size_t i);

// Length of the unit starting at s[i] that the tokenizer treats as one
// character: a well-formed UTF-8 character, else the single invalid byte.
inline std::size_t utf8_unit_length(std::string_view s, std::size_t i) {
  const std::size_t n = utf8_char_length(s, i);
  return n == 0 ? 1 : n;
}

// Decodes the well-formed character at s[i] (length from utf8_char_length).
char32_t utf8_decode(std::string_view s, std::size_t i, std::size_t length);

void utf8_append(std::string& out, char32_t cp);

// Replaces each maximal invalid subsequence with U+FFFD, as the WHATWG / Rust
// from_utf8_lossy rule does, so decoded text matches the reference bytewise.
std::string utf8_lossy(std::string_view bytes);

bool utf8_valid(std::string_view s);

// Unicode White_Space (the set Rust's char::is_whitespace uses).
bool is_unicode_whitespace(char32_t cp);

}  // namespace specpipe::tokenization
