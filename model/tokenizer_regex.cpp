#include "model/tokenizer_regex.hpp"

#include <stdexcept>

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

namespace specpipe::tokenization {

namespace {

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

struct match_data_deleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof buffer);
  return n < 0 ? "PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buffer));
}

}  // namespace

void regex_pattern::code_deleter::operator()(void* code) const { pcre2_code_free(as_code(code)); }

regex_pattern::regex_pattern(std::string_view pattern, bool literal) : pattern_(pattern) {
  // PCRE2_LITERAL refuses UCP (there are no classes to widen anyway).
  std::uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error, &offset, nullptr);
  if (code == nullptr) {
    throw std::invalid_argument("bad regex at offset " + std::to_string(offset) + ": " +
                                pcre2_message(error));
  }
  code_.reset(code);
  // JIT is an optimisation only: without it pcre2_match interprets.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
}

void regex_pattern::find_all(std::string_view subject,
                             std::vector<std::pair<std::size_t, std::size_t>>& out) const {
  pcre2_code* code = as_code(code_.get());
  std::unique_ptr<pcre2_match_data, match_data_deleter> md(
      pcre2_match_data_create_from_pattern(code, nullptr));
  if (!md) throw std::bad_alloc();
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  std::size_t start = 0;
  while (start < subject.size()) {
    const int rc = pcre2_match(code, text, subject.size(), start, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw std::runtime_error("regex match failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const std::size_t b = ov[0];
    const std::size_t e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      start = e;
    } else {
      // An empty match: step over one character (or invalid byte) and retry.
      start = b + 1;
      while (start < subject.size() && (static_cast<unsigned char>(subject[start]) & 0xC0) == 0x80) {
        ++start;
      }
    }
  }
}

}  // namespace specpipe::tokenization
