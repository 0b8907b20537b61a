#pragma once
// The `specpipe eval` subcommands; run_eval (commands.hpp) dispatches
// to them. Each takes argv with argv[0] = its own name.
namespace specpipe::apps {

int eval_ppl_main(int argc, char** argv);
int eval_passkey_main(int argc, char** argv);
int eval_agree_main(int argc, char** argv);
int eval_accept_main(int argc, char** argv);

}  // namespace specpipe::apps
