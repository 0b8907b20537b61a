#pragma once
// The one error type for bad model input (config.json, safetensors, tokenizer
// files): it names the file and the field or tensor, so a user can fix the input.
#include <filesystem>
#include <stdexcept>
#include <string>

namespace specpipe {

class model_error : public std::runtime_error {
 public:
  model_error(const std::filesystem::path& file, const std::string& field, const std::string& what)
      : std::runtime_error(file.string() + (field.empty() ? "" : ": " + field) + ": " + what),
        file_(file), field_(field) {}
  const std::filesystem::path& file() const { return file_; }
  const std::string& field() const { return field_; }

 private:
  std::filesystem::path file_;
  std::string field_;
};

}  // namespace specpipe
