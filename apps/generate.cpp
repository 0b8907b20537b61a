// `specpipe generate`: load a model, prefill a prompt, stream the continuation.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>

#include "apps/cli_support.hpp"
#include "apps/commands.hpp"
#include "apps/generate_cuda.hpp"
#include "apps/quantspec_cli.hpp"
#include "actors/actor_runtime.hpp"
#include "actors/cpu_step_compute.hpp"
#include "actors/model_sampling.hpp"
#include "actors/pipeline.hpp"
#include "actors/quantspec_step_compute.hpp"
#include "actors/specache_step_compute.hpp"
#include "model/generator.hpp"
#include "model/kv_mode.hpp"
#include "model/model.hpp"

namespace specpipe::apps {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw usage_error("--prompt-file: cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int generate_main(int argc, char** argv) {
  po::options_description desc("specpipe generate flags");
  std::string model_flag, prompt, prompt_file, device = "cpu", trace_file, kv = "full", gamma = "5",
      prefetch = "speculative";
  quantspec_flags qs;
  std::vector<std::string> stop;
  int max_tokens = 64, threads = 0, top_k = 0;
  float temperature = 0.8f, top_p = 1.0f;
  unsigned long long seed = 0;
  long long context = 0, group = 0, residual = 0;
  int kv_bits = 0, topk = 64;
  double gpu_memory = 0;
  desc.add_options()
    ("help,h", "show this help")
    ("model,m", po::value(&model_flag), "Hugging Face checkpoint directory (default: the embedded model)")
    ("prompt,p", po::value(&prompt), "prompt text")
    ("prompt-file", po::value(&prompt_file), "read the prompt from a file")
    ("max-tokens,n", po::value(&max_tokens)->default_value(64), "tokens to generate at most")
    ("temperature,t", po::value(&temperature)->default_value(0.8f), "sampling temperature; 0 = greedy")
    ("top-p", po::value(&top_p)->default_value(1.0f), "nucleus sampling mass, in (0, 1]")
    ("top-k", po::value(&top_k)->default_value(0), "keep the k most likely tokens; 0 = off")
    ("seed", po::value(&seed)->default_value(0), "random seed for sampling")
    ("stop", po::value(&stop)->composing(), "stop string (repeatable); not printed")
    ("ignore-eos", "keep generating past the end-of-sequence token")
    ("no-bos", "do not prepend the BOS token")
    ("context", po::value(&context)->default_value(0), "context length in tokens (default: the model's)")
    ("device", po::value(&device)->default_value("cpu"), "cpu or cuda")
    ("threads", po::value(&threads)->default_value(0), "CPU threads; 0 = all cores")
    ("kv", po::value(&kv)->default_value("full"),
     "KV cache (CPU): full, kivi, specache (SpeCache: low-bit copy + prefetched 16-bit rows), hier, or quantspec "
     "(self-speculative decoding: 4-bit draft over INT4 KV, 16-bit target over INT8 KV)")
    ("kv-bits", po::value(&kv_bits)->default_value(0),
     "kivi: 1, 2 or 4 (default 2); specache: 1 or 2 (default 1); hier: 4 (INT4) or 8 (INT8, default)")
    ("topk", po::value(&topk)->default_value(64), "specache: 16-bit rows fetched per layer and KV head")
    ("prefetch", po::value(&prefetch)->default_value("speculative"),
     "specache: speculative (the speculative token's attention picks the next step's rows) or output (the real "
     "query's, fetched within the step: the paper's ablation)")
    ("group", po::value(&group)->default_value(0),
     "tokens per quantization group (kivi/specache 64, hier/quantspec 128)")
    ("residual", po::value(&residual)->default_value(0), "kivi/specache full-precision window in tokens (default 64)")
    ("gamma", po::value(&gamma)->default_value("5"), "quantspec: draft tokens per round, or 'auto' to adapt it")
    ("trace", po::value(&trace_file), "write a Chrome trace of the run (open in ui.perfetto.dev)")
    ("gpu-memory", po::value(&gpu_memory)->default_value(0.0),
     "--device cuda: refuse a run whose weights, caches and scratch exceed this many GiB (0: no cap)");
  add_draft_flags(desc, qs);
  po::variables_map vm;
  if (!parse_flags(argc, argv, desc, vm, "usage: specpipe generate [--model DIR] --prompt TEXT [flags]"))
    return 0;

  if (device != "cpu" && device != "cuda")
    throw usage_error("--device: '" + device + "' is not one of cpu, cuda");
  if (!(gpu_memory >= 0 && gpu_memory <= 1e6))
    throw usage_error("--gpu-memory: must be >= 0 GiB, got " + std::to_string(gpu_memory));
  if (gpu_memory > 0 && device != "cuda") throw usage_error("--gpu-memory: applies to --device cuda");
  if (max_tokens < 0) throw usage_error("--max-tokens: must be >= 0, got " + std::to_string(max_tokens));
  if (threads < 0) throw usage_error("--threads: must be >= 0, got " + std::to_string(threads));
  if (context < 0) throw usage_error("--context: must be >= 0, got " + std::to_string(context));
  if (vm.count("prompt") && vm.count("prompt-file"))
    throw usage_error("--prompt and --prompt-file are exclusive");
  if (vm.count("prompt-file")) prompt = read_file(prompt_file);
  else if (!vm.count("prompt")) throw usage_error("--prompt (or --prompt-file) is required");

  const bool quantspec = kv == "quantspec";
  if (!quantspec && (!vm["gamma"].defaulted() || !vm["weight-group"].defaulted() || qs.quantize_lm_head))
    throw usage_error("--gamma, --weight-group and --draft-lm-head apply to --kv quantspec only");
  kv_mode kv_choice;
  quantspec_step_options qs_opts;
  if (quantspec) {
    if (kv_bits || residual)
      throw usage_error("--kv quantspec: the draft reads INT4 and the target INT8 KV; --kv-bits and --residual "
                        "do not apply");
    if (!vm["topk"].defaulted() || !vm["prefetch"].defaulted())
      throw usage_error("--topk/--prefetch: only --kv specache fetches rows");
    qs_opts.kv_group = quantspec_group_of(group);
    qs_opts.gamma = gamma_of(gamma, qs_opts.kv_group);
    qs_opts.draft = draft_options_of(qs);
    qs_opts.threads = threads;
  } else {
    try {
      kv_choice = parse_kv_mode(kv, kv_bits, group, residual);
      set_specache_flags(kv_choice, topk, prefetch);
    } catch (const std::invalid_argument& e) {
      throw usage_error(std::string(e.what()) + (kv == "kivi" || kv == "full" || kv == "specache" || kv == "hier"
                                                     ? ""
                                                     : " (or quantspec)"));
    }
  }
  if (device == "cuda") check_gpu_topk(kv_choice);
  if (device == "cuda" && quantspec && qs_opts.kv_group != 32 && qs_opts.kv_group != 64 && qs_opts.kv_group != 128)
    throw usage_error("--group: the GPU's hierarchical cache uses groups of 32, 64 or 128 tokens, got " +
                      std::to_string(qs_opts.kv_group));
  if (device == "cuda" && kv_choice.format != kv_format::full &&
      kv_choice.group != 32 && kv_choice.group != 64 && kv_choice.group != 128)
    throw usage_error("--group: the GPU's quantized caches use groups of 32, 64 or 128 tokens, got " +
                      std::to_string(kv_choice.group));

  sampling_params sp{temperature, top_p, top_k, seed};
  try {
    sp.validate();
  } catch (const std::invalid_argument& e) {
    throw usage_error(std::string("--") + e.what());
  }

  const auto dir = resolve_model_dir(model_flag);
  model m = model::load(dir);
  const std::int64_t max_context = context > 0 ? context : m.config.max_position_embeddings;
  if (context > m.config.max_position_embeddings)
    throw usage_error("--context: " + std::to_string(context) + " exceeds the model's " +
                      std::to_string(m.config.max_position_embeddings) + " positions");

  generation_request req;
  req.prompt = m.tok.encode(prompt, !vm.count("no-bos") && m.tok.add_bos_default());
  req.max_tokens = max_tokens;
  req.sampling = sp;
  req.stop = stop;
  req.ignore_eos = vm.count("ignore-eos") > 0;
  if (std::int64_t(req.prompt.size()) > max_context)
    throw std::invalid_argument("prompt: " + std::to_string(req.prompt.size()) +
                                " tokens exceed the context of " + std::to_string(max_context) +
                                " tokens");

  std::vector<std::int32_t> eos = m.tok.eos_ids();
  eos.insert(eos.end(), m.config.eos_token_ids.begin(), m.config.eos_token_ids.end());

  // One request: the caches and the host store need room for its prompt and
  // continuation only, not for the model's whole context (131072 tokens of
  // pinned memory for Llama-3.1 otherwise).
  const std::int64_t needed =
      std::min(max_context, std::int64_t(req.prompt.size()) + std::int64_t(req.max_tokens));

  // The actor pipeline: one worker (its compute on the CPU, or cuda_forward
  // on GPU 0), the host KV store, the transfer engine and planner, and the
  // tracer with --trace.
  actor_runtime runtime;
  pipeline_options popts;
  popts.max_context = needed;
  popts.max_sequences_per_worker = 1;
  popts.trace = vm.count("trace") > 0;
  popts.trace_file = trace_file;
  popts.eos_ids = eos;
  popts.detokenize = model_detokenizer(m.tok);
  popts.make_picker = model_picker_factory();
  popts.topk = kv_choice.topk;
  std::shared_ptr<step_compute> compute;
  std::string kv_text = kv_choice.describe();
  if (quantspec) {
    qs_opts.max_context = needed;
    compute = device == "cuda" ? make_generate_cuda_quantspec_compute(m, qs_opts, gpu_memory)
                               : make_quantspec_step_compute(m.config, m.weights, qs_opts);
    kv_text = "quantspec G=" + std::to_string(qs_opts.kv_group) + " gamma " +
              (qs_opts.gamma.adaptive ? std::string("auto") : std::to_string(qs_opts.gamma.gamma)) +
              " (draft: 4-bit weights + INT4 KV, target: INT8 KV)";
  } else if (device == "cuda") {
    compute = make_generate_cuda_compute(m, needed, kv_choice, gpu_memory, popts.trace);
    if (kv_choice.format == kv_format::full) kv_text = "full (bf16)";
  } else if (kv_choice.speculative()) {
    compute = make_specache_step_compute(m.config, m.weights, {needed, threads, specache_config_of(kv_choice)});
  } else {
    cpu_step_options copts{needed, threads, {}};
    if (kv_choice.format != kv_format::full) copts.make_cache = kv_cache_factory(kv_choice);
    compute = make_cpu_step_compute(m.config, m.weights, copts);
  }
  pipeline pipe(runtime.system(), {compute}, popts);

  std::cout << prompt << std::flush;
  const auto res = pipe.generate(1, req, [](std::string_view d) { std::cout << d << std::flush; });
  std::cout << "\n";

  print_timing_line(res, dir.filename().string(), device, kv_text);
  if (kv_choice.speculative()) {
    if (device == "cuda") print_gpu_specache_line(m, needed, kv_choice, pipe.stats().specache);
    else print_specache_line(pipe.stats().specache);
  }
  if (quantspec) {
    print_spec_line(res.spec);
    std::fprintf(stderr, "[%s%s]\n", describe_draft_memory(m.config, qs_opts.draft).c_str(),
                 device == "cuda" ? "; quantized on the GPU from the bf16 weights" : "");
  }
  if (popts.trace) std::fprintf(stderr, "[trace: %llu events -> %s]\n",
                                static_cast<unsigned long long>(pipe.flush_trace()), trace_file.c_str());
  return 0;
}

}  // namespace

int run_generate(int argc, char** argv) { return guarded("generate", generate_main, argc, argv); }

}  // namespace specpipe::apps
