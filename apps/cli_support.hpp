#pragma once
// Small pieces every subcommand shares: flag parsing with readable errors,
// the default model directory, and list-valued flags ("1,8,32").
#include <boost/program_options.hpp>

#include "model/generator.hpp"
#include "model/kv_mode.hpp"
#include "model/specache_stats.hpp"

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace specpipe::apps {

namespace po = boost::program_options;

// A bad flag or flag value; reported as "specpipe CMD: error: ..." with exit 2.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses argv (argv[0] is the subcommand) into vm; --help prints `desc` and
// returns false. Throws usage_error on unknown flags or bad values.
bool parse_flags(int argc, char** argv, const po::options_description& desc, po::variables_map& vm,
                 const char* usage_line);

// --model, else $SPECPIPE_MODEL, else the embedded default (models/default in
// the source tree, or beside the executable).
std::filesystem::path resolve_model_dir(const std::string& flag);

// "4096,32768" -> {4096, 32768}; accepts k/K suffixes ("32k"). Throws usage_error.
std::vector<long long> parse_int_list(const std::string& flag, const std::string& text);

// generate's closing line on stderr: prompt and decode rates, why it ended,
// the model, the device and the cache.
void print_timing_line(const generation_result& res, const std::string& model_name, const std::string& device,
                       const std::string& kv);

// SpeCache's figures of a run, on stderr after the timing line.
void print_specache_line(const specache_stats& s);

// --device cuda with --kv specache: the GPU fetches at most
// kernels::cuda::topk_max_k rows per layer and KV head. Throws usage_error.
void check_gpu_topk(const kv_mode& mode);

// Runs `body`, mapping exceptions to the exit codes documented in commands.hpp.
int guarded(const char* command, int (*body)(int, char**), int argc, char** argv);

}  // namespace specpipe::apps
