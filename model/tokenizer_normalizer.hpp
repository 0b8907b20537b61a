#pragma once
// The tokenizer.json "normalizer": the steps sentencepiece-style files use
// (Prepend, Replace with a string pattern, Strip), in a Sequence or alone.
// Unicode normalization forms and other types are rejected with a model_error
// rather than silently skipped, since they would change the ids.
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/value.hpp>

#include "model/tokenizer_json.hpp"

namespace specpipe::tokenization {

class normalizer {
 public:
  normalizer() = default;
  // `v` is the "normalizer" value, or nullptr for none.
  static normalizer from_json(const boost::json::value* v, const json_reader& reader,
                              const std::string& field);

  bool empty() const { return steps_.empty(); }
  std::string apply(std::string_view text) const;

 private:
  enum class kind { prepend, replace, strip };
  struct step {
    kind type;
    std::string pattern;  // prepend: the prefix; replace: what to replace
    std::string content;  // replace: the replacement
    bool left = false;    // strip
    bool right = false;
  };
  void add(const boost::json::value& v, const json_reader& reader, const std::string& field);
  std::vector<step> steps_;
};

// Replaces every non-overlapping occurrence of `from`, left to right.
// prefix + s, built by appending (GCC 12 misreports insert(0, ...) under -Wrestrict).
std::string prepended(std::string_view prefix, std::string_view s);

std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace specpipe::tokenization
