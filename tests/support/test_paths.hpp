#pragma once
// Where tests find the source tree, the fixtures and the build. The paths are
// compiled in (SPECPIPE_SOURCE_DIR, SPECPIPE_TEST_DATA_DIR,
// SPECPIPE_BINARY_DIR), but a test binary may run from a copy of the tree at
// another path (a GPU machine): environment variables of the same names win,
// and SPECPIPE_SOURCE_DIR alone moves the fixtures along with it
// (<source>/tests/data).
#include <filesystem>

namespace specpipe::test {

std::filesystem::path source_dir();
std::filesystem::path test_data_dir();
std::filesystem::path binary_dir();
// <source>/models/default: the embedded trained model.
std::filesystem::path default_model_dir();

}  // namespace specpipe::test
