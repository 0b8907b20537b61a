// The public tokenizer: added-token split, then per plain segment normalize,
// pre-tokenize and BPE (the order of tokenizers' TokenizerImpl::encode).
#include "model/tokenizer.hpp"

#include <stdexcept>

#include "model/model_error.hpp"
#include "model/tokenizer_impl.hpp"

namespace specpipe {

std::optional<std::int32_t> tokenizer::impl::find(std::string_view token) const {
  if (const auto it = added_ids.find(token); it != added_ids.end()) return it->second;
  return model.id(token);
}

tokenizer::tokenizer(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
tokenizer::tokenizer(tokenizer&&) noexcept = default;
tokenizer& tokenizer::operator=(tokenizer&&) noexcept = default;
tokenizer::~tokenizer() = default;

tokenizer tokenizer::load(const std::filesystem::path& path) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) file = path / "tokenizer.json";
  if (!std::filesystem::is_regular_file(file, ec)) throw model_error(file, "", "no tokenizer.json here");
  auto p = tokenization::load_tokenizer_json(file);
  tokenization::load_special_ids(*p, file.parent_path());
  return tokenizer(std::move(p));
}

std::vector<std::int32_t> tokenizer::encode(std::string_view text, bool add_bos) const {
  const impl& t = *impl_;
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_bos && t.bos) ids.push_back(*t.bos);

  std::vector<tokenization::input_segment> segments;
  if (t.matcher.empty()) {
    if (!text.empty()) segments.push_back({0, text.size(), -1});
  } else {
    t.matcher.split(text, segments);
  }
  std::vector<std::string> words;
  for (const tokenization::input_segment& seg : segments) {
    if (seg.token >= 0) {
      ids.push_back(seg.token);
      continue;
    }
    const std::string_view plain = text.substr(seg.begin, seg.end - seg.begin);
    words.clear();
    if (t.normalizer.empty()) {
      t.pre_tokenizer.run(plain, seg.begin == 0, words);
    } else {
      t.pre_tokenizer.run(t.normalizer.apply(plain), seg.begin == 0, words);
    }
    for (const std::string& w : words) t.model.encode(w, ids);
  }
  return ids;
}

std::string tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special) const {
  const impl& t = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const std::int32_t id : ids) {
    // Ids with no token are skipped, as the reference's decode does.
    if (id < 0 || static_cast<std::size_t>(id) >= t.id_to_token.size() || !t.has_token[id]) continue;
    if (skip_special && t.special[id]) continue;
    tokens.push_back(t.id_to_token[id]);
  }
  if (t.has_decoder) return t.decoder.decode(std::move(tokens));
  // No decoder: tokenizers joins the token strings with spaces.
  std::string out;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out += ' ';
    out += tokens[i];
  }
  return out;
}

std::int32_t tokenizer::vocab_size() const { return static_cast<std::int32_t>(impl_->id_to_token.size()); }
std::optional<std::int32_t> tokenizer::bos_id() const { return impl_->bos; }
const std::vector<std::int32_t>& tokenizer::eos_ids() const { return impl_->eos; }
bool tokenizer::add_bos_default() const { return impl_->add_bos; }
std::optional<std::int32_t> tokenizer::token_id(std::string_view token) const { return impl_->find(token); }

std::string tokenizer::token_text(std::int32_t id) const {
  if (id < 0 || id >= vocab_size() || !impl_->has_token[id]) {
    throw std::out_of_range(impl_->file.string() + ": no token with id " + std::to_string(id) +
                            " (vocabulary size " + std::to_string(vocab_size()) + ")");
  }
  return impl_->id_to_token[id];
}

bool tokenizer::is_special(std::int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[id];
}

}  // namespace specpipe
