#pragma once
// The `specpipe` subcommands. Each parses its own flags and returns the
// process exit code: 0 success, 1 runtime failure (bad model, bad input),
// 2 usage error (bad flags).
namespace specpipe::apps {

int run_generate(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_trace(int argc, char** argv);
int run_eval(int argc, char** argv);

}  // namespace specpipe::apps
