#include "model/tokenizer_normalizer.hpp"

#include <boost/json/object.hpp>

#include "model/tokenizer_utf8.hpp"

namespace specpipe::tokenization {

namespace json = boost::json;

std::string prepended(std::string_view prefix, std::string_view s) {
  std::string out;
  out.reserve(prefix.size() + s.size());
  out += prefix;
  out += s;
  return out;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  for (std::size_t hit; (hit = text.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(text.substr(pos, hit - pos));
    out.append(to);
  }
  out.append(text.substr(pos));
  return out;
}

normalizer normalizer::from_json(const json::value* v, const json_reader& reader,
                                 const std::string& field) {
  normalizer n;
  if (v != nullptr) n.add(*v, reader, field);
  return n;
}

void normalizer::add(const json::value& v, const json_reader& reader, const std::string& field) {
  const json::object& o = reader.as_object(v, field);
  const std::string type(reader.as_string(reader.required(o, "type", field), json_path(field, "type")));
  if (type == "Sequence") {
    const std::string list = json_path(field, "normalizers");
    const json::array& steps = reader.as_array(reader.required(o, "normalizers", field), list);
    for (std::size_t i = 0; i < steps.size(); ++i) add(steps[i], reader, json_path(list, i));
  } else if (type == "Prepend") {
    steps_.push_back({kind::prepend,
                      std::string(reader.as_string(reader.required(o, "prepend", field),
                                                   json_path(field, "prepend"))),
                      {}});
  } else if (type == "Replace") {
    const std::string pfield = json_path(field, "pattern");
    const json::object& pattern = reader.as_object(reader.required(o, "pattern", field), pfield);
    const json::value* literal = json_reader::member(pattern, "String");
    if (literal == nullptr) {
      reader.fail(pfield, "only {\"String\": ...} patterns are supported in a Replace normalizer");
    }
    steps_.push_back({kind::replace, std::string(reader.as_string(*literal, json_path(pfield, "String"))),
                      std::string(reader.as_string(reader.required(o, "content", field),
                                                   json_path(field, "content")))});
  } else if (type == "Strip") {
    step s{kind::strip, {}, {}};
    s.left = reader.bool_or(o, "strip_left", field, true);
    s.right = reader.bool_or(o, "strip_right", field, true);
    steps_.push_back(s);
  } else {
    reader.fail(json_path(field, "type"), "unsupported normalizer \"" + type +
                                              "\" (supported: Sequence, Prepend, Replace, Strip)");
  }
}

namespace {

std::string_view strip_whitespace(std::string_view s, bool left, bool right) {
  if (left) {
    std::size_t i = 0;
    while (i < s.size()) {
      const std::size_t n = utf8_char_length(s, i);
      if (n == 0 || !is_unicode_whitespace(utf8_decode(s, i, n))) break;
      i += n;
    }
    s.remove_prefix(i);
  }
  if (right) {
    // Walk back over whole characters: find each one's lead byte first.
    while (!s.empty()) {
      std::size_t lead = s.size() - 1;
      while (lead > 0 && (static_cast<unsigned char>(s[lead]) & 0xC0) == 0x80) --lead;
      const std::size_t n = utf8_char_length(s, lead);
      if (n != s.size() - lead || !is_unicode_whitespace(utf8_decode(s, lead, n))) break;
      s.remove_suffix(n);
    }
  }
  return s;
}

}  // namespace

std::string normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (const step& st : steps_) {
    switch (st.type) {
      case kind::prepend:
        // Hugging Face prepends only to non-empty text.
        if (!s.empty()) s = prepended(st.pattern, s);
        break;
      case kind::replace:
        s = replace_all(s, st.pattern, st.content);
        break;
      case kind::strip:
        s = std::string(strip_whitespace(s, st.left, st.right));
        break;
    }
  }
  return s;
}

}  // namespace specpipe::tokenization
