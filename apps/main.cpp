// `specpipe`: one binary, one subcommand per job.
#include <cstring>
#include <iostream>
#include <string_view>

#include "apps/cli_support.hpp"
#include "apps/commands.hpp"

namespace {

void print_usage(std::ostream& os) {
  os << "usage: specpipe <command> [flags]\n\n"
        "commands:\n"
        "  generate   generate text from a prompt (default: the embedded model)\n"
        "  bench      prefill/decode throughput against the roofline (--kernels: attention, GEMV)\n"
        "  trace      summarize or render a trace written by generate --trace\n"
        "  eval       cache-mode quality: perplexity, passkey retrieval, agreement with full\n\n"
        "'specpipe <command> --help' lists a command's flags.\n";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace specpipe::apps;
  if (argc < 2) {
    print_usage(std::cerr);
    return 2;
  }
  const std::string_view cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    print_usage(std::cout);
    return 0;
  }
  if (cmd == "generate") return run_generate(argc - 1, argv + 1);
  if (cmd == "bench") return run_bench(argc - 1, argv + 1);
  if (cmd == "trace") return run_trace(argc - 1, argv + 1);
  if (cmd == "eval") return run_eval(argc - 1, argv + 1);
  std::cerr << "specpipe: unknown command '" << cmd << "'\n";
  print_usage(std::cerr);
  return 2;
}
