#include "apps/cli_runner.hpp"
#include "support/test_paths.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

namespace specpipe::testing {
namespace fs = std::filesystem;

namespace {
std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

cli_result run_specpipe(const std::string& args) {
  temp_dir tmp;
  const fs::path bin = test::binary_dir() / "apps" / "specpipe";
  std::ostringstream cmd_text;
  cmd_text << '\'' << bin.string() << "' " << args << " > '" << (tmp.path() / "out").string() << "' 2> '"
           << (tmp.path() / "err").string() << "' < /dev/null";
  const std::string cmd = cmd_text.str();
  const int status = std::system(cmd.c_str());
  cli_result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(tmp.path() / "out");
  r.err = slurp(tmp.path() / "err");
  return r;
}

fs::path default_model_dir() { return test::default_model_dir(); }

temp_dir::temp_dir() {
  std::random_device rd;
  path_ = fs::temp_directory_path() /
          ("specpipe-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
  fs::create_directories(path_);
}

temp_dir::~temp_dir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void copy_model(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from))
    if (e.is_regular_file()) fs::copy_file(e.path(), to / e.path().filename());
}

}  // namespace specpipe::testing
