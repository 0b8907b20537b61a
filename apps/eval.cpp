// `specpipe eval`: how much a KV-cache mode costs in quality, on the CPU
// backend. Perplexity (ppl), passkey retrieval (passkey), agreement with the
// full cache (agree), and QuantSpec's draft acceptance (accept).
#include <iostream>
#include <string_view>

#include "apps/cli_support.hpp"
#include "apps/commands.hpp"
#include "apps/eval_commands.hpp"

namespace specpipe::apps {
namespace {

void print_eval_usage(std::ostream& os) {
  os << "usage: specpipe eval <ppl|passkey|agree|accept> [flags]\n\n"
        "  ppl       perplexity of the next --tokens tokens after a --context prefix, per cache mode\n"
        "  passkey   passkey retrieval accuracy by length and needle depth, per cache mode\n"
        "  agree     greedy agreement and KL divergence of each cache mode against full\n"
        "  accept    QuantSpec's draft acceptance rate by gamma and context length\n\n"
        "'specpipe eval <kind> --help' lists its flags.\n";
}

}  // namespace

int run_eval(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "specpipe eval: error: missing the kind of evaluation\n";
    print_eval_usage(std::cerr);
    return 2;
  }
  const std::string_view kind = argv[1];
  if (kind == "-h" || kind == "--help" || kind == "help") {
    print_eval_usage(std::cout);
    return 0;
  }
  if (kind == "ppl") return guarded("eval ppl", eval_ppl_main, argc - 1, argv + 1);
  if (kind == "passkey") return guarded("eval passkey", eval_passkey_main, argc - 1, argv + 1);
  if (kind == "agree") return guarded("eval agree", eval_agree_main, argc - 1, argv + 1);
  if (kind == "accept") return guarded("eval accept", eval_accept_main, argc - 1, argv + 1);
  std::cerr << "specpipe eval: error: unknown kind '" << kind << "' (expected ppl, passkey, agree or accept)\n";
  print_eval_usage(std::cerr);
  return 2;
}

}  // namespace specpipe::apps
