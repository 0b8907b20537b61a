#pragma once
// A compiled PCRE2 pattern for the pre-tokenizer splits. UTF + UCP so that
// \s, \p{L}, \p{N} and (?i:...) follow Unicode as the reference (Oniguruma)
// does; JIT-compiled when the library supports it. Invalid UTF-8 in the
// subject is allowed (PCRE2_MATCH_INVALID_UTF): such bytes never match and
// fall into the gaps between matches, so byte-level BPE still sees them.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace specpipe::tokenization {

class regex_pattern {
 public:
  // Throws std::invalid_argument with PCRE2's message and offset on a bad
  // pattern. `literal` compiles the text as a plain string.
  regex_pattern(std::string_view pattern, bool literal);

  // Appends the [begin, end) byte ranges of successive non-overlapping,
  // non-empty matches. Safe to call from several threads at once.
  void find_all(std::string_view subject, std::vector<std::pair<std::size_t, std::size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct code_deleter {
    void operator()(void* code) const;
  };
  std::string pattern_;
  std::unique_ptr<void, code_deleter> code_;  // pcre2_code_8, kept out of the header
};

}  // namespace specpipe::tokenization
