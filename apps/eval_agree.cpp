// `specpipe eval agree`: how closely each cache mode follows the full cache.
// On the same teacher-forced text (prefill --context tokens, then --tokens
// decode steps feeding the true token), compare every next-token
// distribution with the full cache's: the share of positions where the
// greedy choices agree, and the mean KL(full || mode) in nats.
#include <boost/json.hpp>

#include <algorithm>
#include <iostream>
#include <optional>

#include "apps/eval_commands.hpp"
#include "apps/eval_common.hpp"
#include "model/eval_metrics.hpp"
#include "model/eval_windows.hpp"
#include "model/model.hpp"

namespace specpipe::apps {
namespace {

struct agreement {
  std::int64_t positions = 0;
  std::int64_t agreed = 0;
  double kl_sum = 0;
  double kl_max = 0;
  std::optional<specache_stats> spec;  // SpeCache modes only
};

}  // namespace

int eval_agree_main(int argc, char** argv) {
  po::options_description desc("specpipe eval agree flags");
  eval_common_flags common;
  long long context = 0, tokens = 0, windows = 1;
  desc.add_options()("help,h", "show this help");
  add_eval_common_flags(desc, common);
  desc.add_options()
    ("context", po::value(&context)->required(), "tokens prefilled before comparing (BOS included)")
    ("tokens", po::value(&tokens)->required(), "positions compared per window, one decode step each")
    ("windows", po::value(&windows)->default_value(1), "non-overlapping windows per text, spread evenly");
  po::variables_map vm;
  if (!parse_flags(argc, argv, desc, vm,
                   "usage: specpipe eval agree --text FILE --context N --tokens M --kv MODE,... [flags]"))
    return 0;
  const auto modes = check_eval_common_flags(common, vm, true);
  require_positive("context", context);
  require_positive("tokens", tokens);
  require_positive("windows", windows);

  const model m = model::load(resolve_model_dir(common.model));
  const auto shape = eval_window_of(m.config, m.tok, context, tokens);
  const eval_mode reference{"full", 0};
  for (const auto& mode : modes) check_eval_mode(mode);
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
  const std::int64_t total = std::int64_t((modes.size() + 1) * texts.size()) * windows * tokens;
  auto progress = make_eval_progress("eval agree", total);

  const std::size_t vocab = std::size_t(m.config.vocab_size);
  std::vector<agreement> results(modes.size());
  std::vector<float> ref_logits(std::size_t(tokens) * vocab);
  std::vector<std::int32_t> seq;
  for (std::size_t ti = 0; ti < texts.size(); ++ti) {
    for (const std::int64_t s : starts[ti]) {
      seq.assign(bos.begin(), bos.end());
      seq.insert(seq.end(), texts[ti].tokens.begin() + s, texts[ti].tokens.begin() + s + window);
      const std::span<const std::int32_t> ids(seq);
      const auto prefill = ids.first(std::size_t(context));
      const auto targets = ids.subspan(std::size_t(context));
      // The reference run keeps every distribution; each mode is then
      // compared position by position without holding two caches at once.
      {
        auto session = make_eval_session(reference, fwd, positions, common.topk);
        teacher_forced(*session, m.config.vocab_size, prefill, targets,
                       [&](std::size_t i, std::span<const float> logits) {
                         std::copy(logits.begin(), logits.end(), ref_logits.begin() + std::ptrdiff_t(i * vocab));
                       },
                       progress.get());
      }
      for (std::size_t mi = 0; mi < modes.size(); ++mi) {
        auto session = make_eval_session(modes[mi], fwd, positions, common.topk);
        auto& r = results[mi];
        teacher_forced(*session, m.config.vocab_size, prefill, targets,
                       [&](std::size_t i, std::span<const float> logits) {
                         const std::span<const float> ref(ref_logits.data() + i * vocab, vocab);
                         const double kl = kl_divergence(ref, logits);
                         ++r.positions;
                         r.agreed += greedy_token(ref) == greedy_token(logits);
                         r.kl_sum += kl;
                         r.kl_max = std::max(r.kl_max, kl);
                       },
                       progress.get());
        if (const auto* st = eval_session_stats(*session)) {
          if (!r.spec) r.spec.emplace();
          r.spec->merge(*st);
        }
      }
    }
  }
  progress->finish();

  boost::json::array mode_results;
  std::vector<std::vector<std::string>> rows;
  for (std::size_t mi = 0; mi < modes.size(); ++mi) {
    const auto& r = results[mi];
    const double agree = double(r.agreed) / double(r.positions);
    const double mean_kl = r.kl_sum / double(r.positions);
    mode_results.push_back({{"mode", modes[mi].label()},
                            {"name", modes[mi].name},
                            {"bits", modes[mi].bits},
                            {"positions", r.positions},
                            {"greedy_agreed", r.agreed},
                            {"greedy_agreement", agree},
                            {"mean_kl", mean_kl},
                            {"max_kl", r.kl_max}});
    if (r.spec) mode_results.back().as_object()["specache"] = specache_json(*r.spec);
    rows.push_back({modes[mi].label(), std::to_string(r.positions), format_fixed(100 * agree, 2) + "%",
                    format_fixed(mean_kl, 6), format_fixed(r.kl_max, 6)});
  }
  std::cout << "agreement with full: " << texts.size() << " text(s) x " << windows << " window(s), context "
            << context << ", " << tokens << " positions each\n";
  print_table(std::cout, {"mode", "positions", "greedy_agree", "mean_kl", "max_kl"}, rows);
  for (std::size_t mi = 0; mi < modes.size(); ++mi)
    if (results[mi].spec) std::cout << specache_line(modes[mi].label(), *results[mi].spec) << "\n";

  if (vm.count("json")) {
    boost::json::array files;
    for (const auto& t : texts) files.push_back(boost::json::value(t.file));
    write_json_file(common.json, {{"command", "eval agree"},
                                  {"model", m.dir.string()},
                                  {"reference", reference.label()},
                                  {"context", context},
                                  {"tokens", tokens},
                                  {"windows", windows},
                                  {"texts", std::move(files)},
                                  {"modes", std::move(mode_results)}});
  }
  return 0;
}

}  // namespace specpipe::apps
