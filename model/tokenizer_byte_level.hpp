#pragma once
// GPT-2's reversible byte <-> unicode map (openai/gpt-2 encoder.py,
// bytes_to_unicode): printable Latin-1 bytes map to themselves, the other 68
// bytes to U+0100.. in order, so every byte string becomes printable text that
// BPE can work on and decoding can invert exactly.
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace specpipe::tokenization {

class byte_level_map {
 public:
  static const byte_level_map& instance();

  // Appends the mapped form of each byte of `bytes`.
  void encode(std::string_view bytes, std::string& out) const;
  // The byte a code point stands for, if it is one of the 256 map images.
  std::optional<unsigned char> byte_of(char32_t cp) const;
  // Inverts encode over a token string; nullopt when some character is not a
  // map image (Hugging Face then keeps that token's raw bytes).
  std::optional<std::string> decode(std::string_view mapped) const;

 private:
  byte_level_map();
  std::array<std::string, 256> utf8_of_byte_;
  std::array<char32_t, 256> cp_of_byte_{};
  std::array<short, 324> byte_of_cp_{};  // images are all below U+0144
};

}  // namespace specpipe::tokenization
