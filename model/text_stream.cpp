#include "model/text_stream.hpp"

#include <algorithm>

namespace specpipe {
namespace {

// Bytes at the end of s that form an incomplete UTF-8 sequence.
std::size_t incomplete_utf8_tail(std::string_view s) {
  const std::size_t n = s.size();
  for (std::size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;
    std::size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return need > back ? back : 0;
  }
  return 0;
}

std::size_t find_stop(std::string_view text, const std::vector<std::string>& stop) {
  std::size_t best = std::string_view::npos;
  for (const auto& s : stop)
    if (!s.empty()) best = std::min(best, text.find(s));
  return best;
}

}  // namespace

std::size_t stream_safe_prefix(std::string_view text, const std::vector<std::string>& stop) {
  std::size_t safe = text.size() - incomplete_utf8_tail(text);
  // Decoders turn the bytes of a character that is not complete yet into
  // U+FFFD; the next token usually completes it and the replacement vanishes
  // from the re-decoded text. Hold a trailing U+FFFD back, as incremental
  // detokenizers do, so a delta never shows what the final text will not have.
  constexpr std::string_view replacement = "\xEF\xBF\xBD";
  while (safe >= replacement.size() && text.substr(safe - replacement.size(), replacement.size()) == replacement)
    safe -= replacement.size();
  for (const auto& s : stop) {
    if (s.empty()) continue;
    for (std::size_t k = std::min(s.size() - 1, text.size()); k > 0; --k)
      if (text.substr(text.size() - k) == std::string_view(s).substr(0, k)) {
        safe = std::min(safe, text.size() - k);
        break;
      }
  }
  return safe;
}

text_stream::text_stream(std::vector<std::string> stop, detokenizer decode)
    : stop_(std::move(stop)), decode_(std::move(decode)) {}

text_stream::pushed text_stream::push(std::int32_t token) {
  tokens_.push_back(token);
  text_ = decode_(tokens_);
  pushed r;
  if (const auto at = find_stop(text_, stop_); at != std::string::npos) {
    text_.resize(at);
    r.stopped = true;
    return r;  // the held-back rest comes out through flush()
  }
  const std::size_t safe = stream_safe_prefix(text_, stop_);
  if (safe > shown_) {
    r.delta = text_.substr(shown_, safe - shown_);
    shown_ = safe;
  }
  return r;
}

std::string text_stream::flush() {
  if (text_.size() <= shown_) return {};
  std::string rest = text_.substr(shown_);
  shown_ = text_.size();
  return rest;
}

}  // namespace specpipe
