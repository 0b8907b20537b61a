#include "support/test_paths.hpp"

#include <cstdlib>

namespace specpipe::test {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

}  // namespace

std::filesystem::path source_dir() {
  if (const char* v = env("SPECPIPE_SOURCE_DIR")) return v;
  return SPECPIPE_SOURCE_DIR;
}

std::filesystem::path test_data_dir() {
  if (const char* v = env("SPECPIPE_TEST_DATA_DIR")) return v;
  if (env("SPECPIPE_SOURCE_DIR")) return source_dir() / "tests" / "data";
  return SPECPIPE_TEST_DATA_DIR;
}

std::filesystem::path binary_dir() {
  if (const char* v = env("SPECPIPE_BINARY_DIR")) return v;
  return SPECPIPE_BINARY_DIR;
}

std::filesystem::path default_model_dir() { return source_dir() / "models" / "default"; }

}  // namespace specpipe::test
