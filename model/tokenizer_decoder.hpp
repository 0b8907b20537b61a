#pragma once
// The tokenizer.json "decoder": turns token strings back into text. Each step
// maps the list of token strings to a new list, as tokenizers' decode_chain
// does, and the result is their concatenation. Supported: ByteLevel,
// Replace (string pattern), ByteFallback, Fuse, Strip, Metaspace, Sequence.
#include <string>
#include <vector>

#include <boost/json/value.hpp>

#include "model/tokenizer_json.hpp"

namespace specpipe::tokenization {

class decoder {
 public:
  decoder() = default;
  // `v` is the "decoder" value, or nullptr for none (tokens are concatenated).
  static decoder from_json(const boost::json::value* v, const json_reader& reader, const std::string& field);

  std::string decode(std::vector<std::string> tokens) const;

 private:
  enum class kind { byte_level, replace, byte_fallback, fuse, strip, metaspace };
  struct step {
    kind type;
    std::string pattern;  // replace: from; strip: the character; metaspace: replacement
    std::string content;  // replace: to
    std::size_t start = 0;  // strip
    std::size_t stop = 0;
    bool drop_first_replacement = true;  // metaspace: prepend_scheme != never
  };
  void add(const boost::json::value& v, const json_reader& reader, const std::string& field);
  static void apply(const step& st, std::vector<std::string>& tokens);
  std::vector<step> steps_;
};

}  // namespace specpipe::tokenization
