#include "apps/cli_support.hpp"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>

#include "kernels/cuda/topk.hpp"
#include "model/model_error.hpp"

namespace specpipe::apps {

bool parse_flags(int argc, char** argv, const po::options_description& desc, po::variables_map& vm,
                 const char* usage_line) {
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    if (vm.count("help")) {
      std::cout << usage_line << "\n\n" << desc << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw usage_error(e.what());
  }
  return true;
}

std::filesystem::path resolve_model_dir(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("SPECPIPE_MODEL"); env && *env) return env;
  namespace fs = std::filesystem;
  const fs::path compiled = SPECPIPE_DEFAULT_MODEL_DIR;
  std::error_code ec;
  if (fs::is_directory(compiled, ec)) return compiled;
  // A binary moved elsewhere: look for models/default above the executable.
  fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  for (int up = 0; up < 4 && !dir.empty(); ++up, dir = dir.parent_path())
    if (fs::is_directory(dir / "models" / "default", ec)) return dir / "models" / "default";
  return compiled;
}

std::vector<long long> parse_int_list(const std::string& flag, const std::string& text) {
  std::vector<long long> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    long long mult = 1;
    if (!item.empty() && (item.back() == 'k' || item.back() == 'K')) {
      mult = 1024;
      item.pop_back();
    }
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v <= 0)
      throw usage_error("--" + flag + ": '" + text + "' is not a list of positive integers");
    if (v > std::numeric_limits<long long>::max() / mult)
      throw usage_error("--" + flag + ": '" + item + (mult > 1 ? "k" : "") + "' is too large");
    out.push_back(v * mult);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

void print_timing_line(const generation_result& res, const std::string& model_name, const std::string& device,
                       const std::string& kv) {
  const double pre_tps = res.prefill_seconds > 0 ? double(res.prompt_tokens) / res.prefill_seconds : 0;
  // Tokens the decode steps produced: one per forward, or a speculative
  // round's several (every generated token after the prefill's).
  const double decoded = res.spec.drafts > 0 ? double(res.tokens.size() > 0 ? res.tokens.size() - 1 : 0)
                                             : double(res.decode_forwards);
  const double dec_tps = res.decode_seconds > 0 ? decoded / res.decode_seconds : 0;
  std::fprintf(stderr, "[prompt %lld tokens, %.1f tok/s | decode %zu tokens, %.1f tok/s | finish: %s | %s, %s | kv %s]\n",
               static_cast<long long>(res.prompt_tokens), pre_tps, res.tokens.size(), dec_tps,
               res.finish_reason.c_str(), model_name.c_str(), device.c_str(), kv.c_str());
}

void print_specache_line(const specache_stats& s) {
  std::fprintf(stderr,
               "[specache: %lld steps | top-k hit rate %.1f%% (%lld of %lld rows) | speculative token matched "
               "%.1f%% | %.1f KiB fetched per step]\n",
               static_cast<long long>(s.steps), 100 * s.hit_rate(), static_cast<long long>(s.hits),
               static_cast<long long>(s.needed), 100 * s.guess_rate(),
               s.steps > 0 ? double(s.bytes_fetched) / double(s.steps) / 1024.0 : 0.0);
}

void check_gpu_topk(const kv_mode& mode) {
  if (mode.speculative() && mode.topk > kernels::cuda::topk_max_k)
    throw usage_error("--topk: the GPU fetches at most " + std::to_string(kernels::cuda::topk_max_k) +
                      " rows per layer and KV head, got " + std::to_string(mode.topk));
}

int guarded(const char* command, int (*body)(int, char**), int argc, char** argv) {
  try {
    return body(argc, argv);
  } catch (const usage_error& e) {
    std::cerr << "specpipe " << command << ": error: " << e.what() << "\n"
              << "(see 'specpipe " << command << " --help')\n";
    return 2;
  } catch (const model_error& e) {
    std::cerr << "specpipe " << command << ": model error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "specpipe " << command << ": error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace specpipe::apps
