#pragma once
// The parts a loaded tokenizer is made of; private to model/tokenizer*.cpp.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "model/tokenizer.hpp"
#include "model/tokenizer_added.hpp"
#include "model/tokenizer_bpe.hpp"
#include "model/tokenizer_decoder.hpp"
#include "model/tokenizer_normalizer.hpp"
#include "model/tokenizer_pretokenizer.hpp"

namespace specpipe {

struct tokenizer::impl {
  std::filesystem::path file;  // the tokenizer.json it came from
  tokenization::bpe_model model;
  tokenization::normalizer normalizer;
  tokenization::pre_tokenizer pre_tokenizer;
  tokenization::decoder decoder;
  bool has_decoder = false;
  std::vector<tokenization::added_token> added;
  tokenization::token_map added_ids;
  tokenization::added_token_matcher matcher;

  std::vector<std::string> id_to_token;  // "" where no token has the id
  std::vector<bool> has_token;
  std::vector<bool> special;

  // What TemplateProcessing puts before $A in a single sequence.
  std::vector<std::int32_t> template_prefix;
  bool has_template = false;

  std::optional<std::int32_t> bos;
  std::vector<std::int32_t> eos;
  bool add_bos = false;

  explicit impl(tokenization::bpe_model m) : model(std::move(m)) {}
  std::optional<std::int32_t> find(std::string_view token) const;
};

namespace tokenization {

// Parses tokenizer.json (everything but the BOS/EOS side files).
std::unique_ptr<tokenizer::impl> load_tokenizer_json(const std::filesystem::path& file);

// Sets bos / eos / add_bos from the template and, when present beside the
// tokenizer.json, tokenizer_config.json, generation_config.json, config.json.
void load_special_ids(tokenizer::impl& t, const std::filesystem::path& dir);

}  // namespace tokenization
}  // namespace specpipe
