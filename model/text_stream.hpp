#pragma once
// The text side of one sequence's decode: tokens in, text deltas out, with
// the rules every decode loop uses (the direct loop of model/generator.cpp
// and the actor scheduler print the same bytes through it): the full text is re-decoded after each token, a stop string
// ends the text just before it, and a delta never splits a UTF-8 character
// nor shows text that may still become the start of a stop string.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace specpipe {

using detokenizer = std::function<std::string(std::span<const std::int32_t>)>;

class text_stream {
 public:
  text_stream(std::vector<std::string> stop, detokenizer decode);

  struct pushed {
    std::string delta;     // may be empty (text held back)
    bool stopped = false;  // a stop string appeared; the text ends before it
  };
  pushed push(std::int32_t token);
  // The text still held back, once the sequence ends.
  std::string flush();

  const std::vector<std::int32_t>& tokens() const { return tokens_; }
  const std::string& text() const { return text_; }

 private:
  std::vector<std::string> stop_;
  detokenizer decode_;
  std::vector<std::int32_t> tokens_;
  std::string text_;
  std::size_t shown_ = 0;
};

// Bytes of `text` safe to show: whole UTF-8 characters, and no suffix that is
// a proper prefix of a stop string.
std::size_t stream_safe_prefix(std::string_view text, const std::vector<std::string>& stop);

}  // namespace specpipe
