#pragma once
// Runs the built `specpipe` binary as a user would and captures what it says.
#include <filesystem>
#include <string>

namespace specpipe::testing {

struct cli_result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// `args` is appended to the binary's path as is (quote where needed).
cli_result run_specpipe(const std::string& args);

std::filesystem::path default_model_dir();

// A fresh, empty temporary directory removed by the destructor.
class temp_dir {
 public:
  temp_dir();
  ~temp_dir();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Copies a checkpoint directory so a test can damage the copy.
void copy_model(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace specpipe::testing
