#include "model/tokenizer_json.hpp"

#include <fstream>
#include <sstream>

#include <boost/json/parse.hpp>

#include "model/model_error.hpp"

namespace specpipe::tokenization {

namespace json = boost::json;

boost::json::value json_reader::parse_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw model_error(file, "", "cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw model_error(file, "", "read error");
  boost::system::error_code ec;
  json::value v = json::parse(text.str(), ec);
  if (ec) throw model_error(file, "", "not valid JSON: " + ec.message());
  return v;
}

void json_reader::fail(const std::string& field, const std::string& what) const {
  throw model_error(file_, field, what);
}

std::string json_reader::type_name(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: return "null";
    case json::kind::bool_: return "a boolean";
    case json::kind::int64:
    case json::kind::uint64: return "an integer";
    case json::kind::double_: return "a number";
    case json::kind::string: return "a string";
    case json::kind::array: return "an array";
    case json::kind::object: return "an object";
  }
  return "an unknown value";
}

const json::object& json_reader::as_object(const json::value& v, const std::string& field) const {
  if (!v.is_object()) fail(field, "expected an object, found " + type_name(v));
  return v.get_object();
}

const json::array& json_reader::as_array(const json::value& v, const std::string& field) const {
  if (!v.is_array()) fail(field, "expected an array, found " + type_name(v));
  return v.get_array();
}

std::string_view json_reader::as_string(const json::value& v, const std::string& field) const {
  if (!v.is_string()) fail(field, "expected a string, found " + type_name(v));
  return v.get_string();
}

bool json_reader::as_bool(const json::value& v, const std::string& field) const {
  if (!v.is_bool()) fail(field, "expected a boolean, found " + type_name(v));
  return v.get_bool();
}

std::int64_t json_reader::as_int(const json::value& v, const std::string& field) const {
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(INT64_MAX)) {
    return static_cast<std::int64_t>(v.get_uint64());
  }
  fail(field, "expected an integer, found " + type_name(v));
}

const json::value* json_reader::member(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

const json::value& json_reader::required(const json::object& o, std::string_view key,
                                         const std::string& field) const {
  const json::value* v = member(o, key);
  if (v == nullptr) fail(json_path(field, key), "missing");
  return *v;
}

bool json_reader::bool_or(const json::object& o, std::string_view key, const std::string& field,
                          bool fallback) const {
  const json::value* v = member(o, key);
  return v == nullptr ? fallback : as_bool(*v, json_path(field, key));
}

std::string json_path(const std::string& parent, std::string_view child) {
  return parent.empty() ? std::string(child) : parent + "." + std::string(child);
}

std::string json_path(const std::string& parent, std::size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

std::string quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  out += s;
  out += '"';
  return out;
}

}  // namespace specpipe::tokenization
