// `specpipe eval accept`: how often QuantSpec's draft (4-bit weights over the
// INT4 KV) is accepted by its target (16-bit weights over INT8 KV), by gamma
// and context length. Each window of a text gives a prefix of --context
// tokens (BOS included), prefilled once by the target; then, for every
// gamma, QuantSpec decodes --tokens tokens from it (greedily unless
// --temperature > 0), and the drafts, kept tokens and kept-by-position
// counts are summed per (context, gamma): "rate" is accepted / drafted,
// "alpha" the per-token rate (model/spec_stats.hpp). The prefix comes from the text;
// what is drafted and verified is the model's own continuation, as in serving.
#include <boost/json.hpp>

#include <iostream>

#include "apps/eval_commands.hpp"
#include "apps/eval_common.hpp"
#include "apps/quantspec_cli.hpp"
#include "model/draft_weights.hpp"
#include "model/eval_windows.hpp"
#include "model/hier_cache.hpp"
#include "model/model.hpp"
#include "model/quantspec.hpp"

namespace specpipe::apps {
namespace {

struct gamma_choice {
  std::string label;  // "4" or "auto"
  gamma_options opts;
};

std::vector<gamma_choice> parse_gamma_list(const std::string& text, std::int64_t group) {
  std::vector<gamma_choice> out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    for (const auto& g : out)
      if (g.label == item) throw usage_error("--gamma: '" + item + "' is listed twice");
    out.push_back({item, gamma_of(item, group)});
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string percent(double v) { return format_fixed(100.0 * v, 1) + "%"; }

}  // namespace

int eval_accept_main(int argc, char** argv) {
  po::options_description desc("specpipe eval accept flags");
  eval_common_flags common;
  quantspec_flags qs;
  std::string gammas = "1,4,8", contexts = "2048";
  long long tokens = 128, windows = 1, group = 0, draft_weight_bits = 4, draft_kv_bits = 4;
  float temperature = 0;
  unsigned long long seed = 0;
  desc.add_options()("help,h", "show this help");
  add_eval_common_flags(desc, common);
  desc.add_options()
    ("gamma", po::value(&gammas)->default_value(gammas), "draft lengths to compare, e.g. 1,4,8 (or auto)")
    ("context", po::value(&contexts)->default_value(contexts), "prefix lengths in tokens (BOS included), e.g. 512,2048")
    ("tokens", po::value(&tokens)->default_value(128), "tokens QuantSpec decodes after each prefix")
    ("windows", po::value(&windows)->default_value(1), "prefixes per text, spread evenly")
    ("group", po::value(&group)->default_value(0), "G of the hierarchical cache (default 128; its buffer holds 2G)")
    ("temperature", po::value(&temperature)->default_value(0.0f), "0: greedy verification; > 0: speculative sampling")
    ("seed", po::value(&seed)->default_value(0), "sampling seed (temperature > 0)")
    ("draft-weights", po::value(&draft_weight_bits)->default_value(4),
     "ablation: 4 (the draft's 4-bit projections) or 16 (the target's): what the weights cost in acceptance")
    ("draft-kv", po::value(&draft_kv_bits)->default_value(4),
     "ablation: 4 (the draft reads INT4 KV) or 8 (the target's INT8 read): what the KV costs in acceptance");
  add_draft_flags(desc, qs);
  po::variables_map vm;
  if (!parse_flags(argc, argv, desc, vm,
                   "usage: specpipe eval accept --kv quantspec --gamma 1,4,8 --text FILE... --context N [--tokens M] "
                   "[flags]"))
    return 0;
  if (!vm["kv"].defaulted() && common.kv != "quantspec")
    throw usage_error("--kv: eval accept measures the quantspec mode only, got '" + common.kv + "'");
  if (!vm["kv-bits"].defaulted())
    throw usage_error("--kv-bits: quantspec's draft reads INT4 and its target INT8; the bits are not a choice");
  common.kv = "full";  // the shared checks below parse --kv as a cache mode
  check_eval_common_flags(common, vm, true);
  require_positive("tokens", tokens);
  require_positive("windows", windows);
  if (!(temperature >= 0)) throw usage_error("--temperature: must be >= 0");
  if (draft_weight_bits != 4 && draft_weight_bits != 16)
    throw usage_error("--draft-weights: 4 or 16, got " + std::to_string(draft_weight_bits));
  if (draft_kv_bits != 4 && draft_kv_bits != 8)
    throw usage_error("--draft-kv: 4 or 8, got " + std::to_string(draft_kv_bits));
  const draft_parts parts{draft_weight_bits == 4, draft_kv_bits == 4};
  const std::int64_t G = quantspec_group_of(group);
  const auto gamma_list = parse_gamma_list(gammas, G);
  const auto context_list = parse_int_list("context", contexts);
  const draft_options dopts = draft_options_of(qs);
  sampling_params sp;
  sp.temperature = temperature;
  sp.seed = seed;

  const model m = model::load(resolve_model_dir(common.model));
  std::vector<eval_window_shape> shapes;
  for (const long long ctx : context_list) shapes.push_back(eval_window_of(m.config, m.tok, ctx, tokens));
  const auto texts = load_eval_texts(common.texts, m.tok);
  std::vector<std::vector<std::vector<std::int64_t>>> starts(context_list.size());  // [context][text]
  for (std::size_t c = 0; c < context_list.size(); ++c)
    for (const auto& t : texts) {
      const std::int64_t window = context_list[c] - std::int64_t(shapes[c].bos.size());
      try {
        starts[c].push_back(eval_window_starts(std::int64_t(t.tokens.size()), window, windows));
      } catch (const std::invalid_argument& e) {
        throw std::runtime_error("--text: '" + t.file + "' " + e.what() + " (--context " +
                                 std::to_string(context_list[c]) + ")");
      }
    }

  cpu_forward fwd(m.config, m.weights, common.threads);
  const draft_weights draft(m.config, m.weights, dopts, &fwd.pool());
  std::cerr << describe_draft_memory(m.config, dopts) << "\n";
  const std::int64_t total =
      std::int64_t(context_list.size() * gamma_list.size() * texts.size()) * windows * tokens;
  auto progress = make_eval_progress("eval accept", total, "tokens");

  std::vector<std::vector<spec_decode_stats>> stats(context_list.size(),
                                                    std::vector<spec_decode_stats>(gamma_list.size()));
  std::vector<std::vector<double>> seconds(context_list.size(), std::vector<double>(gamma_list.size(), 0));
  for (std::size_t c = 0; c < context_list.size(); ++c) {
    const std::int64_t ctx = context_list[c], max_len = ctx + tokens + 1;
    for (std::size_t ti = 0; ti < texts.size(); ++ti)
      for (const std::int64_t s : starts[c][ti]) {
        std::vector<std::int32_t> prefix = shapes[c].bos;
        const auto& tt = texts[ti].tokens;
        prefix.insert(prefix.end(), tt.begin() + s, tt.begin() + s + (ctx - std::int64_t(shapes[c].bos.size())));
        // One target prefill per prefix; every gamma starts from a copy of its cache.
        hier_cache base(m.config, max_len, {G, hier_read::int8}, &fwd.pool());
        std::int32_t first = 0;
        {
          quantspec_decoder pre(fwd, draft.set(), base, base, sp, gamma_list[0].opts);
          first = pre.prefill(prefix);
        }
        for (std::size_t g = 0; g < gamma_list.size(); ++g) {
          hier_cache cache = base;
          quantspec_decoder dec(fwd, draft.set(), cache, cache, sp, gamma_list[g].opts, parts);
          const auto t0 = std::chrono::steady_clock::now();
          std::int64_t done = 1;  // the prefill's token
          progress->advance();
          std::int32_t pending = first;
          while (done < tokens) {
            const quantspec_round r = dec.round(pending, max_len);
            const std::int64_t n = std::min<std::int64_t>(std::int64_t(r.tokens.size()), tokens - done);
            done += n;
            progress->advance(n);
            pending = r.tokens.back();
          }
          seconds[c][g] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          stats[c][g].merge(dec.stats());
        }
      }
  }
  progress->finish();

  std::cout << "acceptance: " << texts.size() << " text(s) x " << windows << " window(s), " << tokens
            << " tokens decoded after each prefix, " << (temperature > 0 ? "sampled" : "greedy")
            << " verification, G=" << G << ", draft: ";
  if (parts.weights_4bit)
    std::cout << "4-bit weights g" << dopts.group;
  else
    std::cout << "16-bit weights";
  std::cout << ", " << (parts.kv_int4 ? "INT4" : "INT8") << " KV\n";
  std::vector<std::vector<std::string>> rows;
  boost::json::array results;
  for (std::size_t c = 0; c < context_list.size(); ++c)
    for (std::size_t g = 0; g < gamma_list.size(); ++g) {
      const spec_decode_stats& st = stats[c][g];
      boost::json::array kept;
      std::string by_position;
      for (const auto k : st.accepted_per_position) {
        const double share = st.drafts > 0 ? double(k) / double(st.drafts) : 0.0;
        kept.push_back(share);
        if (!by_position.empty()) by_position += ' ';
        by_position += format_fixed(100 * share, 0);
      }
      const double draft_ms = st.draft_tokens > 0 ? 1e3 * st.draft_seconds / double(st.draft_tokens) : 0;
      const double verify_ms = st.drafts > 0 ? 1e3 * st.verify_seconds / double(st.drafts) : 0;
      rows.push_back({std::to_string(context_list[c]), gamma_list[g].label, std::to_string(st.drafts),
                      std::to_string(st.draft_tokens), std::to_string(st.accepted_tokens),
                      percent(st.acceptance_rate()), percent(st.per_token_acceptance()),
                      format_fixed(st.mean_acceptance_length(), 2),
                      format_fixed(draft_ms, 2), format_fixed(verify_ms, 2), by_position});
      results.push_back({{"context", context_list[c]},
                         {"gamma", gamma_list[g].label},
                         {"drafts", st.drafts},
                         {"draft_tokens", st.draft_tokens},
                         {"accepted_tokens", st.accepted_tokens},
                         {"acceptance_rate", st.acceptance_rate()},
                         {"per_token_acceptance", st.per_token_acceptance()},
                         {"rejections", st.rejections},
                         {"mean_acceptance_length", st.mean_acceptance_length()},
                         {"kept_by_position", std::move(kept)},
                         {"draft_ms_per_token", draft_ms},
                         {"verify_ms_per_round", verify_ms},
                         {"seconds", seconds[c][g]}});
    }
  print_table(std::cout, {"context", "gamma", "rounds", "drafted", "accepted", "rate", "alpha", "mean_len", "draft_ms",
                          "verify_ms", "kept% by position"},
              rows);

  if (vm.count("json")) {
    boost::json::array files;
    for (const auto& t : texts) files.push_back(boost::json::value(t.file));
    write_json_file(common.json, {{"command", "eval accept"},
                                  {"model", m.dir.string()},
                                  {"kv", "quantspec"},
                                  {"group", G},
                                  {"weight_group", dopts.group},
                                  {"lm_head_4bit", dopts.quantize_lm_head},
                                  {"draft_weight_bits", draft_weight_bits},
                                  {"draft_kv_bits", draft_kv_bits},
                                  {"tokens", tokens},
                                  {"windows", windows},
                                  {"temperature", temperature},
                                  {"seed", seed},
                                  {"texts", std::move(files)},
                                  {"results", std::move(results)}});
  }
  return 0;
}

}  // namespace specpipe::apps
