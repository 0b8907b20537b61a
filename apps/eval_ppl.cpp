// `specpipe eval ppl`: perplexity through the decode path. For each window the
// first --context tokens (BOS included, as every training row starts with
// BOS) are prefilled, then the next --tokens tokens are fed one at a time as
// decode steps (teacher forcing) and -log p(true token) is summed, so what is
// measured is the cache mode's approximation during decoding.
#include <boost/json.hpp>

#include <chrono>
#include <iostream>
#include <optional>

#include "apps/eval_commands.hpp"
#include "apps/eval_common.hpp"
#include "model/eval_metrics.hpp"
#include "model/eval_windows.hpp"
#include "model/model.hpp"

namespace specpipe::apps {
namespace {

struct text_score {
  perplexity_accumulator acc;
  std::int64_t windows = 0;
};

}  // namespace

int eval_ppl_main(int argc, char** argv) {
  po::options_description desc("specpipe eval ppl flags");
  eval_common_flags common;
  long long context = 0, tokens = 0, windows = 1;
  desc.add_options()("help,h", "show this help");
  add_eval_common_flags(desc, common);
  desc.add_options()
    ("context", po::value(&context)->required(), "tokens prefilled before scoring (BOS included)")
    ("tokens", po::value(&tokens)->required(), "tokens scored per window, one decode step each")
    ("windows", po::value(&windows)->default_value(1), "non-overlapping windows per text, spread evenly");
  po::variables_map vm;
  if (!parse_flags(argc, argv, desc, vm,
                   "usage: specpipe eval ppl --text FILE... --context N --tokens M [--kv MODE,...] [flags]"))
    return 0;
  const auto modes = check_eval_common_flags(common, vm, true);
  require_positive("context", context);
  require_positive("tokens", tokens);
  require_positive("windows", windows);

  const model m = model::load(resolve_model_dir(common.model));
  const auto shape = eval_window_of(m.config, m.tok, context, tokens);
  for (const auto& mode : modes) check_eval_mode(mode);  // unknown modes fail before any work
  const std::vector<std::int32_t>& bos = shape.bos;
  const std::int64_t window = shape.text_tokens;
  const std::int64_t positions = context + tokens;

  const auto texts = load_eval_texts(common.texts, m.tok);
  std::vector<std::vector<std::int64_t>> starts;
  for (const auto& t : texts) {
    try {
      starts.push_back(eval_window_starts(std::int64_t(t.tokens.size()), window, windows));
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error("--text: '" + t.file + "' " + e.what() + " (--context " + std::to_string(context) +
                               " + --tokens " + std::to_string(tokens) + ")");
    }
  }

  cpu_forward fwd(m.config, m.weights, common.threads);
  const std::int64_t total = std::int64_t(modes.size() * texts.size()) * windows * tokens;
  auto progress = make_eval_progress("eval ppl", total);

  boost::json::array mode_results;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> footers;
  std::vector<std::int32_t> seq;
  for (const auto& mode : modes) {
    const auto t0 = std::chrono::steady_clock::now();
    perplexity_accumulator all;
    std::optional<specache_stats> spec;
    boost::json::array per_text;
    for (std::size_t ti = 0; ti < texts.size(); ++ti) {
      text_score score;
      for (const std::int64_t s : starts[ti]) {
        seq.assign(bos.begin(), bos.end());
        const auto& tt = texts[ti].tokens;
        seq.insert(seq.end(), tt.begin() + s, tt.begin() + s + window);
        const std::span<const std::int32_t> all_ids(seq);
        const auto prefill = all_ids.first(std::size_t(context));
        const auto targets = all_ids.subspan(std::size_t(context));
        auto session = make_eval_session(mode, fwd, positions, common.topk);
        teacher_forced(*session, m.config.vocab_size, prefill, targets,
                       [&](std::size_t i, std::span<const float> logits) {
                         score.acc.add(token_nll(logits, targets[i]));
                       },
                       progress.get());
        if (const auto* st = eval_session_stats(*session)) {
          if (!spec) spec.emplace();
          spec->merge(*st);
        }
        ++score.windows;
      }
      all.merge(score.acc);
      per_text.push_back({{"file", texts[ti].file},
                          {"text_tokens", texts[ti].tokens.size()},
                          {"windows", score.windows},
                          {"tokens_scored", score.acc.count()},
                          {"mean_nll", score.acc.mean_nll()},
                          {"perplexity", score.acc.perplexity()}});
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    mode_results.push_back({{"mode", mode.label()},
                            {"name", mode.name},
                            {"bits", mode.bits},
                            {"tokens_scored", all.count()},
                            {"mean_nll", all.mean_nll()},
                            {"perplexity", all.perplexity()},
                            {"seconds", secs},
                            {"texts", std::move(per_text)}});
    if (spec) {
      mode_results.back().as_object()["specache"] = specache_json(*spec);
      footers.push_back(specache_line(mode.label(), *spec));
    }
    rows.push_back({mode.label(), std::to_string(all.count()), format_fixed(all.mean_nll(), 4),
                    format_fixed(all.perplexity(), 3), format_fixed(secs, 1)});
  }
  progress->finish();

  std::cout << "perplexity: " << texts.size() << " text(s) x " << windows << " window(s), context " << context
            << ", " << tokens << " scored tokens each\n";
  print_table(std::cout, {"mode", "tokens", "mean_nll", "perplexity", "seconds"}, rows);
  for (const auto& f : footers) std::cout << f << "\n";

  if (vm.count("json")) {
    boost::json::array files;
    for (const auto& t : texts) files.push_back(boost::json::value(t.file));
    write_json_file(common.json, {{"command", "eval ppl"},
                                  {"model", m.dir.string()},
                                  {"context", context},
                                  {"tokens", tokens},
                                  {"windows", windows},
                                  {"bos", !bos.empty()},
                                  {"texts", std::move(files)},
                                  {"modes", std::move(mode_results)}});
  }
  return 0;
}

}  // namespace specpipe::apps
