#include "model/tokenizer_pretokenizer.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <boost/json/object.hpp>

#include "model/tokenizer_byte_level.hpp"
#include "model/tokenizer_normalizer.hpp"

namespace specpipe::tokenization {

namespace json = boost::json;

void split_by_regex(std::string_view text, const regex_pattern& re, split_behavior behavior, bool invert,
                    std::vector<std::string_view>& out) {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  re.find_all(text, matches);
  // Alternating spans covering the text: (begin, end, is_delimiter).
  struct span {
    std::size_t b, e;
    bool delim;
  };
  std::vector<span> spans;
  spans.reserve(matches.size() * 2 + 1);
  std::size_t pos = 0;
  for (const auto& [b, e] : matches) {
    if (b > pos) spans.push_back({pos, b, invert});
    spans.push_back({b, e, !invert});
    pos = e;
  }
  if (pos < text.size()) spans.push_back({pos, text.size(), invert});

  // The folds below follow tokenizers' normalizer.rs SplitDelimiterBehavior.
  std::vector<span> kept;
  kept.reserve(spans.size());
  bool previous_delim = false;
  switch (behavior) {
    case split_behavior::isolated:
      kept = spans;
      break;
    case split_behavior::removed:
      for (const span& s : spans) {
        if (!s.delim) kept.push_back(s);
      }
      break;
    case split_behavior::merged_with_previous:
      for (const span& s : spans) {
        if (s.delim && !previous_delim && !kept.empty()) {
          kept.back().e = s.e;
        } else {
          kept.push_back(s);
        }
        previous_delim = s.delim;
      }
      break;
    case split_behavior::merged_with_next:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->delim && !previous_delim && !kept.empty()) {
          kept.back().b = it->b;
        } else {
          kept.push_back(*it);
        }
        previous_delim = it->delim;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case split_behavior::contiguous:
      for (const span& s : spans) {
        if (!kept.empty() && s.delim == previous_delim) {
          kept.back().e = s.e;
        } else {
          kept.push_back(s);
        }
        previous_delim = s.delim;
      }
      break;
  }
  for (const span& s : kept) {
    if (s.e > s.b) out.push_back(text.substr(s.b, s.e - s.b));
  }
}

namespace {

split_behavior parse_behavior(std::string_view name, const json_reader& reader, const std::string& field) {
  if (name == "Isolated") return split_behavior::isolated;
  if (name == "Removed") return split_behavior::removed;
  if (name == "MergedWithPrevious") return split_behavior::merged_with_previous;
  if (name == "MergedWithNext") return split_behavior::merged_with_next;
  if (name == "Contiguous") return split_behavior::contiguous;
  reader.fail(field, "unknown split behavior \"" + std::string(name) + "\"");
}

std::shared_ptr<const regex_pattern> compile(std::string_view pattern, bool literal, const json_reader& reader,
                                             const std::string& field) {
  try {
    return std::make_shared<const regex_pattern>(pattern, literal);
  } catch (const std::invalid_argument& e) {
    reader.fail(field, e.what());
  }
}

}  // namespace

pre_tokenizer pre_tokenizer::from_json(const json::value* v, const json_reader& reader,
                                       const std::string& field) {
  pre_tokenizer p;
  if (v != nullptr) p.add(*v, reader, field);
  return p;
}

void pre_tokenizer::add(const json::value& v, const json_reader& reader, const std::string& field) {
  const json::object& o = reader.as_object(v, field);
  const std::string tfield = json_path(field, "type");
  const std::string type(reader.as_string(reader.required(o, "type", field), tfield));
  if (type == "Sequence") {
    const std::string list = json_path(field, "pretokenizers");
    const json::array& steps = reader.as_array(reader.required(o, "pretokenizers", field), list);
    for (std::size_t i = 0; i < steps.size(); ++i) add(steps[i], reader, json_path(list, i));
  } else if (type == "Split") {
    const std::string pfield = json_path(field, "pattern");
    const json::object& pattern = reader.as_object(reader.required(o, "pattern", field), pfield);
    step st{kind::split};
    if (const json::value* re = json_reader::member(pattern, "Regex")) {
      st.regex = compile(reader.as_string(*re, json_path(pfield, "Regex")), false, reader,
                         json_path(pfield, "Regex"));
    } else if (const json::value* lit = json_reader::member(pattern, "String")) {
      st.regex = compile(reader.as_string(*lit, json_path(pfield, "String")), true, reader,
                         json_path(pfield, "String"));
    } else {
      reader.fail(pfield, "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    const std::string bfield = json_path(field, "behavior");
    st.behavior = parse_behavior(reader.as_string(reader.required(o, "behavior", field), bfield), reader, bfield);
    st.invert = reader.bool_or(o, "invert", field, false);
    steps_.push_back(std::move(st));
  } else if (type == "ByteLevel") {
    step st{kind::byte_level};
    st.add_prefix_space = reader.bool_or(o, "add_prefix_space", field, false);
    if (reader.bool_or(o, "use_regex", field, true)) st.regex = compile(gpt2_pattern, false, reader, field);
    steps_.push_back(std::move(st));
    byte_level_ = true;
  } else if (type == "Metaspace") {
    step st{kind::metaspace};
    st.replacement = "\xE2\x96\x81";  // U+2581, sentencepiece's space
    if (const json::value* r = json_reader::member(o, "replacement")) {
      st.replacement = std::string(reader.as_string(*r, json_path(field, "replacement")));
    }
    if (const json::value* scheme = json_reader::member(o, "prepend_scheme")) {
      const std::string sfield = json_path(field, "prepend_scheme");
      const std::string_view s = reader.as_string(*scheme, sfield);
      if (s == "always") {
        st.prepend = prepend_scheme::always;
      } else if (s == "first") {
        st.prepend = prepend_scheme::first;
      } else if (s == "never") {
        st.prepend = prepend_scheme::never;
      } else {
        reader.fail(sfield, "expected \"always\", \"first\" or \"never\", found \"" + std::string(s) + "\"");
      }
    } else {
      // Older files: add_prefix_space (default true) instead of a scheme.
      st.prepend = reader.bool_or(o, "add_prefix_space", field, true) ? prepend_scheme::always
                                                                        : prepend_scheme::never;
    }
    st.split = reader.bool_or(o, "split", field, true);
    if (st.split) st.regex = compile(st.replacement, true, reader, json_path(field, "replacement"));
    steps_.push_back(std::move(st));
  } else if (type == "Digits") {
    step st{kind::split};
    const bool individual = reader.bool_or(o, "individual_digits", field, false);
    st.regex = compile(individual ? R"(\p{N})" : R"(\p{N}+)", false, reader, field);
    steps_.push_back(std::move(st));
  } else {
    reader.fail(tfield, "unsupported pre-tokenizer \"" + type +
                            "\" (supported: Sequence, Split, ByteLevel, Metaspace, Digits)");
  }
}

void pre_tokenizer::apply(const step& st, bool at_input_start, std::vector<std::string>& pieces) const {
  std::vector<std::string> next;
  next.reserve(pieces.size());
  std::vector<std::string_view> cut;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    std::string& piece = pieces[i];
    switch (st.type) {
      case kind::split:
        cut.clear();
        split_by_regex(piece, *st.regex, st.behavior, st.invert, cut);
        for (std::string_view c : cut) next.emplace_back(c);
        break;
      case kind::byte_level: {
        if (st.add_prefix_space && !piece.empty() && piece.front() != ' ') piece = prepended(" ", piece);
        cut.clear();
        if (st.regex) {
          split_by_regex(piece, *st.regex, split_behavior::isolated, false, cut);
        } else if (!piece.empty()) {
          cut.push_back(piece);
        }
        for (std::string_view c : cut) {
          std::string mapped;
          mapped.reserve(c.size() * 2);
          byte_level_map::instance().encode(c, mapped);
          next.push_back(std::move(mapped));
        }
        break;
      }
      case kind::metaspace: {
        std::string s = replace_all(piece, " ", st.replacement);
        const bool prepend = st.prepend == prepend_scheme::always ||
                             (st.prepend == prepend_scheme::first && at_input_start && i == 0);
        if (prepend && !s.empty() && s.rfind(st.replacement, 0) != 0) s = prepended(st.replacement, s);
        if (st.split) {
          cut.clear();
          split_by_regex(s, *st.regex, split_behavior::merged_with_next, false, cut);
          for (std::string_view c : cut) next.emplace_back(c);
        } else if (!s.empty()) {
          next.push_back(std::move(s));
        }
        break;
      }
    }
  }
  pieces = std::move(next);
}

void pre_tokenizer::run(std::string_view segment, bool at_input_start, std::vector<std::string>& words) const {
  std::vector<std::string> pieces;
  if (!segment.empty()) pieces.emplace_back(segment);
  for (const step& st : steps_) apply(st, at_input_start, pieces);
  for (std::string& p : pieces) words.push_back(std::move(p));
}

}  // namespace specpipe::tokenization
