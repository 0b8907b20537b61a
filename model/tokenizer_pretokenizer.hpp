#pragma once
// The tokenizer.json "pre_tokenizer": splits a text segment into the words
// that BPE encodes one at a time. Supported: Split (regex or string pattern,
// all five delimiter behaviours, invert), ByteLevel (GPT-2's regex when
// use_regex, add_prefix_space, then the byte -> unicode map), Metaspace
// (replacement, prepend_scheme first/always/never, split), Digits, and
// Sequence of these.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/value.hpp>

#include "model/tokenizer_json.hpp"
#include "model/tokenizer_regex.hpp"

namespace specpipe::tokenization {

// GPT-2's pattern (openai/gpt-2 encoder.py), which ByteLevel uses when
// use_regex is true.
inline constexpr std::string_view gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class split_behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// Cuts `text` into pieces around the matches of `re` as Hugging Face's
// NormalizedString::split does for `behavior`; `invert` swaps matches and gaps.
void split_by_regex(std::string_view text, const regex_pattern& re, split_behavior behavior, bool invert,
                    std::vector<std::string_view>& out);

class pre_tokenizer {
 public:
  pre_tokenizer() = default;
  // `v` is the "pre_tokenizer" value, or nullptr for none.
  static pre_tokenizer from_json(const boost::json::value* v, const json_reader& reader,
                                 const std::string& field);

  // Appends the words of `segment`. `at_input_start` is true when the segment
  // begins the whole input (Metaspace's prepend_scheme "first").
  void run(std::string_view segment, bool at_input_start, std::vector<std::string>& words) const;

  // True when a ByteLevel step maps bytes to GPT-2's unicode alphabet.
  bool byte_level() const { return byte_level_; }

 private:
  enum class kind { split, byte_level, metaspace };
  enum class prepend_scheme { always, first, never };
  struct step {
    kind type;
    std::shared_ptr<const regex_pattern> regex;  // split, byte_level with use_regex
    split_behavior behavior = split_behavior::isolated;
    bool invert = false;
    bool add_prefix_space = false;  // byte_level
    std::string replacement;        // metaspace
    prepend_scheme prepend = prepend_scheme::always;
    bool split = true;  // metaspace
  };
  void add(const boost::json::value& v, const json_reader& reader, const std::string& field);
  void apply(const step& st, bool at_input_start, std::vector<std::string>& pieces) const;
  std::vector<step> steps_;
  bool byte_level_ = false;
};

}  // namespace specpipe::tokenization
