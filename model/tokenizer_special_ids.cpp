// BOS / EOS and whether to add BOS, from the files beside tokenizer.json.
// Precedence for BOS: tokenizer_config.json's bos_token, then the
// TemplateProcessing prefix, then generation_config.json's and config.json's
// bos_token_id. EOS is the union (in that order) of tokenizer_config.json's
// eos_token and the eos_token_id (an int or a list) of the other two, since
// instruct checkpoints list their end-of-turn ids only in generation_config.
#include <algorithm>

#include <boost/json/object.hpp>

#include "model/model_error.hpp"
#include "model/tokenizer_impl.hpp"

namespace specpipe::tokenization {

namespace json = boost::json;

namespace {

// bos_token / eos_token: "<s>", {"content": "<s>", ...} or null.
std::optional<std::int32_t> named_token(const json::object& cfg, std::string_view key, const json_reader& reader,
                                        const tokenizer::impl& t) {
  const json::value* v = json_reader::member(cfg, key);
  if (v == nullptr) return std::nullopt;
  std::string field(key);
  std::string_view name;
  if (v->is_object()) {
    field = json_path(field, "content");
    name = reader.as_string(reader.required(v->get_object(), "content", std::string(key)), field);
  } else {
    name = reader.as_string(*v, field);
  }
  const auto id = t.find(name);
  if (!id) reader.fail(field, quoted(name) + " is not a token of " + t.file.filename().string());
  return id;
}

std::vector<std::int32_t> token_ids(const json::object& cfg, std::string_view key, const json_reader& reader,
                                    std::int32_t vocab_size) {
  std::vector<std::int32_t> out;
  const json::value* v = json_reader::member(cfg, key);
  if (v == nullptr) return out;
  auto take = [&](const json::value& x, const std::string& field) {
    const std::int64_t id = reader.as_int(x, field);
    if (id < 0 || id >= vocab_size) {
      reader.fail(field, "token id " + std::to_string(id) + " outside the vocabulary [0, " +
                             std::to_string(vocab_size) + ")");
    }
    out.push_back(static_cast<std::int32_t>(id));
  };
  if (v->is_array()) {
    const json::array& list = v->get_array();
    for (std::size_t i = 0; i < list.size(); ++i) take(list[i], json_path(std::string(key), i));
  } else {
    take(*v, std::string(key));
  }
  return out;
}

void add_unique(std::vector<std::int32_t>& to, const std::vector<std::int32_t>& ids) {
  for (const std::int32_t id : ids) {
    if (std::find(to.begin(), to.end(), id) == to.end()) to.push_back(id);
  }
}

}  // namespace

void load_special_ids(tokenizer::impl& t, const std::filesystem::path& dir) {
  const auto vocab_size = static_cast<std::int32_t>(t.id_to_token.size());
  std::optional<std::int32_t> cfg_bos;
  std::optional<bool> cfg_add_bos;
  std::vector<std::int32_t> eos;

  const std::filesystem::path cfg_file = dir / "tokenizer_config.json";
  if (std::filesystem::exists(cfg_file)) {
    const json::value doc = json_reader::parse_file(cfg_file);
    const json_reader reader(cfg_file);
    const json::object& cfg = reader.as_object(doc, "");
    cfg_bos = named_token(cfg, "bos_token", reader, t);
    if (auto e = named_token(cfg, "eos_token", reader, t)) eos.push_back(*e);
    if (const json::value* add = json_reader::member(cfg, "add_bos_token")) {
      cfg_add_bos = reader.as_bool(*add, "add_bos_token");
    }
  }

  std::optional<std::int32_t> side_bos;
  for (const char* name : {"generation_config.json", "config.json"}) {
    const std::filesystem::path file = dir / name;
    if (!std::filesystem::exists(file)) continue;
    const json::value doc = json_reader::parse_file(file);
    const json_reader reader(file);
    const json::object& cfg = reader.as_object(doc, "");
    const std::vector<std::int32_t> bos = token_ids(cfg, "bos_token_id", reader, vocab_size);
    if (!side_bos && !bos.empty()) side_bos = bos.front();
    add_unique(eos, token_ids(cfg, "eos_token_id", reader, vocab_size));
  }

  const std::optional<std::int32_t> template_bos =
      t.template_prefix.empty() ? std::nullopt : std::optional<std::int32_t>(t.template_prefix.front());
  t.bos = cfg_bos ? cfg_bos : template_bos ? template_bos : side_bos;
  t.eos = std::move(eos);
  if (cfg_add_bos) {
    t.add_bos = *cfg_add_bos;
  } else {
    t.add_bos = t.has_template && !t.template_prefix.empty();
  }
  t.add_bos = t.add_bos && t.bos.has_value();
}

}  // namespace specpipe::tokenization
