#include "model/tokenizer_decoder.hpp"

#include <boost/json/object.hpp>

#include "model/tokenizer_byte_level.hpp"
#include "model/tokenizer_normalizer.hpp"
#include "model/tokenizer_utf8.hpp"

namespace specpipe::tokenization {

namespace json = boost::json;

decoder decoder::from_json(const json::value* v, const json_reader& reader, const std::string& field) {
  decoder d;
  if (v != nullptr) d.add(*v, reader, field);
  return d;
}

void decoder::add(const json::value& v, const json_reader& reader, const std::string& field) {
  const json::object& o = reader.as_object(v, field);
  const std::string tfield = json_path(field, "type");
  const std::string type(reader.as_string(reader.required(o, "type", field), tfield));
  auto string_field = [&](std::string_view key) {
    return std::string(reader.as_string(reader.required(o, key, field), json_path(field, key)));
  };
  auto count_field = [&](std::string_view key) -> std::size_t {
    const json::value* n = json_reader::member(o, key);
    if (n == nullptr) return 0;
    const std::int64_t k = reader.as_int(*n, json_path(field, key));
    if (k < 0) reader.fail(json_path(field, key), "expected a count >= 0, found " + std::to_string(k));
    return static_cast<std::size_t>(k);
  };
  if (type == "Sequence") {
    const std::string list = json_path(field, "decoders");
    const json::array& steps = reader.as_array(reader.required(o, "decoders", field), list);
    for (std::size_t i = 0; i < steps.size(); ++i) add(steps[i], reader, json_path(list, i));
  } else if (type == "ByteLevel") {
    steps_.push_back({kind::byte_level});
  } else if (type == "ByteFallback") {
    steps_.push_back({kind::byte_fallback});
  } else if (type == "Fuse") {
    steps_.push_back({kind::fuse});
  } else if (type == "Replace") {
    const std::string pfield = json_path(field, "pattern");
    const json::object& pattern = reader.as_object(reader.required(o, "pattern", field), pfield);
    const json::value* literal = json_reader::member(pattern, "String");
    if (literal == nullptr) reader.fail(pfield, "only {\"String\": ...} patterns are supported in a Replace decoder");
    steps_.push_back({kind::replace, std::string(reader.as_string(*literal, json_path(pfield, "String"))),
                      string_field("content")});
  } else if (type == "Strip") {
    step st{kind::strip, string_field("content")};
    if (utf8_char_length(st.pattern, 0) != st.pattern.size() || st.pattern.empty()) {
      reader.fail(json_path(field, "content"), "expected a single character");
    }
    st.start = count_field("start");
    st.stop = count_field("stop");
    steps_.push_back(std::move(st));
  } else if (type == "Metaspace") {
    step st{kind::metaspace, "\xE2\x96\x81"};
    if (json_reader::member(o, "replacement") != nullptr) st.pattern = string_field("replacement");
    if (const json::value* scheme = json_reader::member(o, "prepend_scheme")) {
      st.drop_first_replacement = reader.as_string(*scheme, json_path(field, "prepend_scheme")) != "never";
    } else {
      st.drop_first_replacement = reader.bool_or(o, "add_prefix_space", field, true);
    }
    steps_.push_back(std::move(st));
  } else {
    reader.fail(tfield, "unsupported decoder \"" + type +
                            "\" (supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)");
  }
}

namespace {

// "<0xNN>" -> the byte, as tokenizers' ByteFallback decoder reads it.
std::optional<unsigned char> byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  unsigned value = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = t[k];
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= static_cast<unsigned>(c - '0');
    } else if (c >= 'A' && c <= 'F') {
      value |= static_cast<unsigned>(c - 'A' + 10);
    } else if (c >= 'a' && c <= 'f') {
      value |= static_cast<unsigned>(c - 'a' + 10);
    } else {
      return std::nullopt;
    }
  }
  return static_cast<unsigned char>(value);
}

}  // namespace

void decoder::apply(const step& st, std::vector<std::string>& tokens) {
  switch (st.type) {
    case kind::byte_level: {
      // All tokens become one string: bytes through the inverse GPT-2 map
      // (a token with a character outside the map keeps its own bytes), then
      // invalid UTF-8 is repaired.
      std::string bytes;
      for (const std::string& t : tokens) {
        if (auto b = byte_level_map::instance().decode(t)) {
          bytes += *b;
        } else {
          bytes += t;
        }
      }
      tokens.assign(1, utf8_lossy(bytes));
      break;
    }
    case kind::replace:
      for (std::string& t : tokens) t = replace_all(t, st.pattern, st.content);
      break;
    case kind::byte_fallback: {
      // Runs of <0xNN> tokens become their bytes when those form valid UTF-8,
      // else one U+FFFD per byte token.
      std::vector<std::string> out;
      out.reserve(tokens.size());
      std::string run;
      std::size_t run_tokens = 0;
      auto flush = [&] {
        if (run_tokens == 0) return;
        if (utf8_valid(run)) {
          out.push_back(run);
        } else {
          for (std::size_t k = 0; k < run_tokens; ++k) out.emplace_back("\xEF\xBF\xBD");
        }
        run.clear();
        run_tokens = 0;
      };
      for (std::string& t : tokens) {
        if (const auto b = byte_token(t)) {
          run.push_back(static_cast<char>(*b));
          ++run_tokens;
        } else {
          flush();
          out.push_back(std::move(t));
        }
      }
      flush();
      tokens = std::move(out);
      break;
    }
    case kind::fuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.assign(1, std::move(all));
      break;
    }
    case kind::strip:
      for (std::string& t : tokens) {
        std::size_t cut = 0;
        for (std::size_t k = 0; k < st.start && t.compare(cut, st.pattern.size(), st.pattern) == 0; ++k) {
          cut += st.pattern.size();
        }
        t.erase(0, cut);
        for (std::size_t k = 0; k < st.stop && t.size() >= st.pattern.size() &&
                                t.compare(t.size() - st.pattern.size(), st.pattern.size(), st.pattern) == 0;
             ++k) {
          t.resize(t.size() - st.pattern.size());
        }
      }
      break;
    case kind::metaspace:
      // tokenizers' Metaspace decoder: the replacement becomes a space, except
      // in the first token, where (unless prepend_scheme is never) it is
      // dropped since the encoder added it.
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = replace_all(tokens[i], st.pattern, i == 0 && st.drop_first_replacement ? "" : " ");
      }
      break;
  }
}

std::string decoder::decode(std::vector<std::string> tokens) const {
  for (const step& st : steps_) apply(st, tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace specpipe::tokenization
