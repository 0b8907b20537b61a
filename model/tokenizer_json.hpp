#pragma once
// Typed access to the JSON of tokenizer files: every accessor names the file
// and the dotted field path in the model_error it throws, and says what type
// it expected and what it found.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <boost/json/value.hpp>

namespace specpipe::tokenization {

class json_reader {
 public:
  explicit json_reader(std::filesystem::path file) : file_(std::move(file)) {}

  // Reads and parses the whole file; a missing file or bad JSON is a model_error.
  static boost::json::value parse_file(const std::filesystem::path& file);

  const std::filesystem::path& file() const { return file_; }
  [[noreturn]] void fail(const std::string& field, const std::string& what) const;

  const boost::json::object& as_object(const boost::json::value& v, const std::string& field) const;
  const boost::json::array& as_array(const boost::json::value& v, const std::string& field) const;
  std::string_view as_string(const boost::json::value& v, const std::string& field) const;
  bool as_bool(const boost::json::value& v, const std::string& field) const;
  std::int64_t as_int(const boost::json::value& v, const std::string& field) const;

  // The member, or nullptr when it is absent or JSON null.
  static const boost::json::value* member(const boost::json::object& o, std::string_view key);
  const boost::json::value& required(const boost::json::object& o, std::string_view key,
                                     const std::string& field) const;
  bool bool_or(const boost::json::object& o, std::string_view key, const std::string& field,
               bool fallback) const;

  static std::string type_name(const boost::json::value& v);

 private:
  std::filesystem::path file_;
};

// "a.b" + "c" -> "a.b.c", "" + "c" -> "c".
std::string json_path(const std::string& parent, std::string_view child);
std::string json_path(const std::string& parent, std::size_t index);

// The text in double quotes, for messages.
std::string quoted(std::string_view s);

}  // namespace specpipe::tokenization
