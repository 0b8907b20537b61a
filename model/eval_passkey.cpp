#include "model/eval_passkey.hpp"

#include <cmath>
#include <stdexcept>

namespace specpipe {

std::string passkey_text(std::string_view format, std::string_view key) {
  constexpr std::string_view slot = "{key}";
  std::string out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t at = format.find(slot, pos);
    out.append(format.substr(pos, at == std::string_view::npos ? std::string_view::npos : at - pos));
    if (at == std::string_view::npos) break;
    out.append(key);
    pos = at + slot.size();
  }
  return out;
}

std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n) {
  if (n == 0) throw std::invalid_argument("uniform_below: empty range");
  // Values >= limit would make the low residues more likely; draw again.
  const std::uint64_t limit = std::uint64_t(-1) - std::uint64_t(-1) % n;
  std::uint64_t x = rng();
  while (x >= limit) x = rng();
  return x % n;
}

std::string passkey_random_key(std::mt19937_64& rng, int digits) {
  if (digits < 1 || digits > 18) throw std::invalid_argument("passkey key: digits must be in [1, 18]");
  std::uint64_t low = 1;
  for (int i = 1; i < digits; ++i) low *= 10;
  return std::to_string(low + uniform_below(rng, low * 10 - low));
}

std::int64_t passkey_needle_offset(double depth, std::int64_t m) {
  return std::int64_t(std::nearbyint(depth * double(m)));  // default FE_TONEAREST: half to even
}

passkey_builder::passkey_builder(const tokenizer& tok) : tok_(tok), question_(encode(passkey_question)) {
  if (const auto bos = tok.bos_id()) bos_.push_back(*bos);
}

std::vector<std::int32_t> passkey_builder::encode(std::string_view text) const { return tok_.encode(text, false); }

passkey_document passkey_builder::assemble(std::span<const std::int32_t> hay, const std::string& key, double depth,
                                           std::int64_t prompt_length) const {
  passkey_document doc;
  doc.key = key;
  doc.depth = depth;
  const auto needle = encode(passkey_text(passkey_needle_format, key));
  const std::int64_t fixed = std::int64_t(bos_.size() + needle.size() + question_.size());
  const std::int64_t m = prompt_length - fixed;
  if (m < 0)
    throw std::invalid_argument("passkey prompt of " + std::to_string(prompt_length) +
                                " tokens is shorter than its fixed parts (" + std::to_string(fixed) + " tokens)");
  if (std::int64_t(hay.size()) < m)
    throw std::invalid_argument("haystack of " + std::to_string(hay.size()) + " tokens, " + std::to_string(m) +
                                " needed");
  const std::int64_t p = passkey_needle_offset(depth, m);
  doc.prompt.reserve(std::size_t(prompt_length));
  doc.prompt.insert(doc.prompt.end(), bos_.begin(), bos_.end());
  doc.prompt.insert(doc.prompt.end(), hay.begin(), hay.begin() + p);
  doc.needle_at = std::int64_t(doc.prompt.size());
  doc.needle_tokens = std::int64_t(needle.size());
  doc.prompt.insert(doc.prompt.end(), needle.begin(), needle.end());
  doc.prompt.insert(doc.prompt.end(), hay.begin() + p, hay.begin() + m);
  doc.prompt.insert(doc.prompt.end(), question_.begin(), question_.end());
  doc.answer = encode(passkey_text(passkey_answer_format, key));
  return doc;
}

passkey_document passkey_builder::eval_sample(const std::vector<haystack_book>& books, std::int64_t length,
                                              int depth_index, double depth, int index, std::uint64_t seed,
                                              int digits) const {
  std::seed_seq seq{std::uint64_t(seed), std::uint64_t(length), std::uint64_t(depth_index), std::uint64_t(index)};
  std::mt19937_64 rng(seq);
  std::vector<std::size_t> fits;
  std::size_t longest = 0;
  for (std::size_t b = 0; b < books.size(); ++b) {
    longest = std::max(longest, books[b].tokens.size());
    if (std::int64_t(books[b].tokens.size()) >= length) fits.push_back(b);
  }
  if (fits.empty())
    throw std::invalid_argument("no haystack text holds " + std::to_string(length) + " tokens (longest: " +
                                std::to_string(longest) + ")");
  const auto& book = books[fits[uniform_below(rng, fits.size())]];
  const auto start = uniform_below(rng, book.tokens.size() - std::size_t(length) + 1);
  const std::string key = passkey_random_key(rng, digits);
  const auto answer_len = std::int64_t(encode(passkey_text(passkey_answer_format, key)).size());
  return assemble(std::span(book.tokens).subspan(start, std::size_t(length)), key, depth, length - answer_len - 1);
}

bool passkey_correct(std::string_view text, std::string_view key) {
  std::size_t i = 0;
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < text.size() && space(text[i])) ++i;
  std::size_t j = i;
  while (j < text.size() && digit(text[j])) ++j;
  return j > i && text.substr(i, j - i) == key;
}

}  // namespace specpipe
