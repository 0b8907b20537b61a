#include "model/tokenizer_utf8.hpp"

namespace specpipe::tokenization {

namespace {

constexpr unsigned char byte_at(std::string_view s, std::size_t i) {
  return static_cast<unsigned char>(s[i]);
}

constexpr bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// Valid ranges of the second byte depend on the lead (Unicode Table 3-7),
// which excludes overlong forms, surrogates and code points above U+10FFFF.
bool second_byte_ok(unsigned char lead, unsigned char b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return is_continuation(b);
  }
}

std::size_t expected_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// How many bytes from s[i] form a valid prefix of a character (at least 1),
// the unit that from_utf8_lossy replaces with a single U+FFFD.
std::size_t invalid_prefix_length(std::string_view s, std::size_t i) {
  const unsigned char lead = byte_at(s, i);
  const std::size_t want = expected_length(lead);
  if (want <= 1) return 1;
  std::size_t k = 1;
  if (i + k < s.size() && second_byte_ok(lead, byte_at(s, i + k))) {
    ++k;
    while (k < want && i + k < s.size() && is_continuation(byte_at(s, i + k))) ++k;
  }
  return k;
}

}  // namespace

std::size_t utf8_char_length(std::string_view s, std::size_t i) {
  if (i >= s.size()) return 0;
  const unsigned char lead = byte_at(s, i);
  const std::size_t want = expected_length(lead);
  if (want <= 1) return want;
  if (i + want > s.size()) return 0;
  if (!second_byte_ok(lead, byte_at(s, i + 1))) return 0;
  for (std::size_t k = 2; k < want; ++k) {
    if (!is_continuation(byte_at(s, i + k))) return 0;
  }
  return want;
}

char32_t utf8_decode(std::string_view s, std::size_t i, std::size_t length) {
  const unsigned char lead = byte_at(s, i);
  if (length == 1) return lead;
  char32_t cp = lead & (0x7F >> length);
  for (std::size_t k = 1; k < length; ++k) cp = (cp << 6) | (byte_at(s, i + k) & 0x3F);
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t i = 0;
  while (i < bytes.size()) {
    const std::size_t n = utf8_char_length(bytes, i);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += invalid_prefix_length(bytes, i);
    }
  }
  return out;
}

bool utf8_valid(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_char_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

bool is_unicode_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace specpipe::tokenization
