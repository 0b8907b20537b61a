#include "model/tokenizer_byte_level.hpp"

#include "model/tokenizer_utf8.hpp"

namespace specpipe::tokenization {

byte_level_map::byte_level_map() {
  byte_of_cp_.fill(-1);
  // bytes_to_unicode(): '!'..'~', '¡'..'¬', '®'..'ÿ' keep their code point;
  // the rest get 256, 257, ... in byte order.
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
    cp_of_byte_[b] = cp;
    byte_of_cp_[cp] = static_cast<short>(b);
    utf8_append(utf8_of_byte_[b], cp);
  }
}

const byte_level_map& byte_level_map::instance() {
  static const byte_level_map map;
  return map;
}

void byte_level_map::encode(std::string_view bytes, std::string& out) const {
  for (const char c : bytes) out += utf8_of_byte_[static_cast<unsigned char>(c)];
}

std::optional<unsigned char> byte_level_map::byte_of(char32_t cp) const {
  if (cp >= byte_of_cp_.size() || byte_of_cp_[cp] < 0) return std::nullopt;
  return static_cast<unsigned char>(byte_of_cp_[cp]);
}

std::optional<std::string> byte_level_map::decode(std::string_view mapped) const {
  std::string out;
  out.reserve(mapped.size());
  for (std::size_t i = 0; i < mapped.size();) {
    const std::size_t n = utf8_char_length(mapped, i);
    if (n == 0) return std::nullopt;
    const auto b = byte_of(utf8_decode(mapped, i, n));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
    i += n;
  }
  return out;
}

}  // namespace specpipe::tokenization
