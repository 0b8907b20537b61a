// Reads a tokenizer.json into tokenizer::impl.
#include <algorithm>

#include <boost/json/object.hpp>

#include "model/model_error.hpp"
#include "model/tokenizer_impl.hpp"

namespace specpipe::tokenization {

namespace json = boost::json;

namespace {

constexpr std::int64_t max_added_id = (1 << 24) - 1;

std::vector<added_token> parse_added_tokens(const json::object& root, const json_reader& reader) {
  std::vector<added_token> out;
  const json::value* v = json_reader::member(root, "added_tokens");
  if (v == nullptr) return out;
  const json::array& list = reader.as_array(*v, "added_tokens");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string field = json_path("added_tokens", i);
    const json::object& o = reader.as_object(list[i], field);
    added_token t;
    const std::int64_t id = reader.as_int(reader.required(o, "id", field), json_path(field, "id"));
    if (id < 0 || id > max_added_id) {
      reader.fail(json_path(field, "id"), "token id " + std::to_string(id) + " out of range");
    }
    t.id = static_cast<std::int32_t>(id);
    t.content = std::string(reader.as_string(reader.required(o, "content", field), json_path(field, "content")));
    if (t.content.empty()) reader.fail(json_path(field, "content"), "empty token");
    t.special = reader.bool_or(o, "special", field, false);
    t.single_word = reader.bool_or(o, "single_word", field, false);
    t.lstrip = reader.bool_or(o, "lstrip", field, false);
    t.rstrip = reader.bool_or(o, "rstrip", field, false);
    out.push_back(std::move(t));
  }
  return out;
}

// TemplateProcessing's "single": the special tokens placed before $A.
void parse_post_processor(const json::value& v, const json_reader& reader, const std::string& field,
                          tokenizer::impl& t) {
  const json::object& o = reader.as_object(v, field);
  const std::string type(reader.as_string(reader.required(o, "type", field), json_path(field, "type")));
  if (type == "Sequence") {
    const std::string list = json_path(field, "processors");
    const json::array& steps = reader.as_array(reader.required(o, "processors", field), list);
    for (std::size_t i = 0; i < steps.size(); ++i) parse_post_processor(steps[i], reader, json_path(list, i), t);
    return;
  }
  // Other processors (ByteLevel: offsets only; Bert/Roberta: not decoder
  // models) do not decide BOS for a causal LM.
  if (type != "TemplateProcessing") return;
  t.has_template = true;
  t.template_prefix.clear();
  const std::string sfield = json_path(field, "single");
  const json::array& single = reader.as_array(reader.required(o, "single", field), sfield);
  const json::object* specials = nullptr;
  if (const json::value* sp = json_reader::member(o, "special_tokens")) {
    specials = &reader.as_object(*sp, json_path(field, "special_tokens"));
  }
  for (std::size_t i = 0; i < single.size(); ++i) {
    const std::string ifield = json_path(sfield, i);
    const json::object& item = reader.as_object(single[i], ifield);
    if (json_reader::member(item, "Sequence") != nullptr) break;
    const json::value* st = json_reader::member(item, "SpecialToken");
    if (st == nullptr) reader.fail(ifield, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    const std::string tfield = json_path(ifield, "SpecialToken");
    const std::string_view name =
        reader.as_string(reader.required(reader.as_object(*st, tfield), "id", tfield), json_path(tfield, "id"));
    // The ids listed under special_tokens win; else the name is looked up.
    bool found = false;
    if (specials != nullptr) {
      if (const json::value* entry = json_reader::member(*specials, name)) {
        const std::string efield = json_path(field, "special_tokens") + "[\"" + std::string(name) + "\"]";
        const json::object& eo = reader.as_object(*entry, efield);
        const json::array& ids = reader.as_array(reader.required(eo, "ids", efield), json_path(efield, "ids"));
        for (std::size_t k = 0; k < ids.size(); ++k) {
          const std::int64_t id = reader.as_int(ids[k], json_path(json_path(efield, "ids"), k));
          if (id < 0 || id >= static_cast<std::int64_t>(t.id_to_token.size()) || !t.has_token[id]) {
            reader.fail(json_path(json_path(efield, "ids"), k), "token id " + std::to_string(id) + " not in the vocabulary");
          }
          t.template_prefix.push_back(static_cast<std::int32_t>(id));
        }
        found = true;
      }
    }
    if (!found) {
      const auto id = t.find(name);
      if (!id) reader.fail(tfield, quoted(name) + " is not a token of this tokenizer");
      t.template_prefix.push_back(*id);
    }
  }
}

}  // namespace

std::unique_ptr<tokenizer::impl> load_tokenizer_json(const std::filesystem::path& file) {
  const json::value doc = json_reader::parse_file(file);
  const json_reader reader(file);
  const json::object& root = reader.as_object(doc, "");
  const json::object& model = reader.as_object(reader.required(root, "model", ""), "model");
  std::string type = "BPE";  // files from old tokenizers versions omit it
  if (const json::value* tv = json_reader::member(model, "type")) type = std::string(reader.as_string(*tv, "model.type"));
  if (type != "BPE") {
    reader.fail("model.type", "unsupported model type \"" + type + "\" (only BPE is supported)");
  }

  auto t = std::make_unique<tokenizer::impl>(bpe_model::from_json(model, reader, "model"));
  t->file = file;
  t->normalizer = normalizer::from_json(json_reader::member(root, "normalizer"), reader, "normalizer");
  t->pre_tokenizer = pre_tokenizer::from_json(json_reader::member(root, "pre_tokenizer"), reader, "pre_tokenizer");
  const json::value* dec = json_reader::member(root, "decoder");
  t->decoder = decoder::from_json(dec, reader, "decoder");
  t->has_decoder = dec != nullptr;

  t->added = parse_added_tokens(root, reader);
  std::int32_t end = t->model.id_end();
  for (const added_token& a : t->added) end = std::max(end, a.id + 1);
  t->id_to_token.assign(static_cast<std::size_t>(end), std::string());
  t->has_token.assign(static_cast<std::size_t>(end), false);
  t->special.assign(static_cast<std::size_t>(end), false);
  for (const auto& [token, id] : t->model.vocab()) {
    t->id_to_token[id] = token;
    t->has_token[id] = true;
  }
  for (const added_token& a : t->added) {
    t->id_to_token[a.id] = a.content;
    t->has_token[a.id] = true;
    t->special[a.id] = a.special;
    t->added_ids[a.content] = a.id;
  }
  t->matcher = added_token_matcher(t->added);

  if (const json::value* pp = json_reader::member(root, "post_processor")) {
    parse_post_processor(*pp, reader, "post_processor", *t);
  }
  return t;
}

}  // namespace specpipe::tokenization
