#pragma once
// Tokenizers read from a Hugging Face tokenizer.json:
//  * byte-level BPE with a regex pre-tokenizer (GPT-2 / Llama-3 style, the
//    regex runs through PCRE2), and
//  * sentencepiece-style BPE with "▁" for spaces and <0xNN> byte fallback
//    (Llama-2, Mistral).
// Special / added tokens are matched in the input text before the model's
// pre-tokenizer runs. BOS/EOS come from tokenizer_config.json,
// generation_config.json and config.json when present.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace specpipe {

class tokenizer {
 public:
  // `path` is a tokenizer.json file or a checkpoint directory holding one
  // (plus the optional tokenizer_config.json / generation_config.json /
  // config.json, which supply BOS/EOS and add_bos). Throws model_error.
  static tokenizer load(const std::filesystem::path& path);

  tokenizer(tokenizer&&) noexcept;
  tokenizer& operator=(tokenizer&&) noexcept;
  ~tokenizer();

  // Encodes text; added/special tokens written literally in the text become
  // their ids. BOS is prepended when `add_bos` and the model has one.
  std::vector<std::int32_t> encode(std::string_view text, bool add_bos = true) const;
  // Decodes ids to UTF-8; special tokens are dropped when skip_special.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special = true) const;

  std::int32_t vocab_size() const;  // highest id + 1, added tokens included
  std::optional<std::int32_t> bos_id() const;
  const std::vector<std::int32_t>& eos_ids() const;
  bool add_bos_default() const;
  std::optional<std::int32_t> token_id(std::string_view token) const;
  std::string token_text(std::int32_t id) const;  // raw vocab string
  bool is_special(std::int32_t id) const;

  struct impl;

 private:
  explicit tokenizer(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace specpipe
