// `specpipe eval passkey`: needle-in-a-haystack retrieval per cache mode.
// Documents follow tools/passkey.py's format (model/eval_passkey.hpp), with
// the haystack drawn from the --text files; each prompt is prefilled and the
// answer decoded greedily for len(answer) + 1 tokens, so the check "the
// first number is the key, whole" can see the token after it.
#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <iostream>

#include "apps/eval_commands.hpp"
#include "apps/eval_common.hpp"
#include "model/eval_heatmap.hpp"
#include "model/eval_metrics.hpp"
#include "model/eval_passkey.hpp"
#include "model/model.hpp"

namespace specpipe::apps {
namespace {

// "5" -> 5 depths evenly from 0 to 1 (one depth: 0.5); "0.05,0.5,0.95" -> those fractions.
std::vector<double> parse_depths(const std::string& text) {
  std::vector<double> out;
  const bool is_count = text.find_first_of(".,") == std::string::npos;
  if (is_count) {
    std::size_t used = 0;
    long long n = 0;
    try {
      n = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (text.empty() || used != text.size() || n < 1 || n > 101)
      throw usage_error("--depths: '" + text + "' is neither a count in [1, 101] nor a list of fractions");
    for (long long j = 0; j < n; ++j) out.push_back(n == 1 ? 0.5 : double(j) / double(n - 1));
    return out;
  }
  std::size_t pos = 0;
  while (true) {
    const std::size_t comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    std::size_t used = 0;
    double v = -1;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || !(v >= 0 && v <= 1))
      throw usage_error("--depths: '" + item + "' in '" + text + "' is not a fraction in [0, 1]");
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

struct cell_result {
  std::int64_t correct = 0;
  std::int64_t samples = 0;
};

}  // namespace

int eval_passkey_main(int argc, char** argv) {
  po::options_description desc("specpipe eval passkey flags");
  eval_common_flags common;
  std::string lengths_flag = "1k,2k,4k,8k", depths_flag = "5", plot, documents_path;
  long long samples = 4, digits = 5;
  unsigned long long seed = 0;
  desc.add_options()("help,h", "show this help");
  add_eval_common_flags(desc, common);
  desc.add_options()
    ("lengths", po::value(&lengths_flag)->default_value(lengths_flag), "document lengths in tokens (k = 1024)")
    ("depths", po::value(&depths_flag)->default_value(depths_flag),
     "needle depths: a count spread from 0 to 1, or fractions '0.05,0.5'")
    ("samples", po::value(&samples)->default_value(4), "documents per (length, depth) cell")
    ("seed", po::value(&seed)->default_value(0), "seed of the haystack windows and keys")
    ("digits", po::value(&digits)->default_value(5), "digits of the pass key")
    ("plot", po::value(&plot), "write the accuracy heatmap (length x depth, one panel per mode) as SVG")
    ("documents", po::value(&documents_path),
     "write every document as JSON Lines (prompt and answer ids, key, each mode's answer), to rerun them "
     "elsewhere (tools/passkey_transformers.py)");
  po::variables_map vm;
  if (!parse_flags(argc, argv, desc, vm,
                   "usage: specpipe eval passkey --text FILE... [--lengths 1k,2k] [--depths 5] [--samples S] "
                   "[--kv MODE,...] [flags]"))
    return 0;
  const auto modes = check_eval_common_flags(common, vm, true);
  const auto lengths = parse_int_list("lengths", lengths_flag);
  const auto depths = parse_depths(depths_flag);
  require_positive("samples", samples);
  if (digits < 1 || digits > 18) throw usage_error("--digits: must be in [1, 18], got " + std::to_string(digits));
  if (vm.count("plot")) check_output_path("plot", plot);
  if (vm.count("documents")) check_output_path("documents", documents_path);

  const model m = model::load(resolve_model_dir(common.model));
  for (const auto n : lengths)
    if (n > m.config.max_position_embeddings)
      throw usage_error("--lengths: " + std::to_string(n) + " exceeds the model's " +
                        std::to_string(m.config.max_position_embeddings) + " positions");
  for (const auto& mode : modes) check_eval_mode(mode);

  std::vector<haystack_book> books;
  for (auto& t : load_eval_texts(common.texts, m.tok)) books.push_back({t.file, std::move(t.tokens)});
  const passkey_builder builder(m.tok);

  // The documents do not depend on the mode: build them once.
  std::vector<passkey_document> docs;
  for (const auto n : lengths)
    for (std::size_t j = 0; j < depths.size(); ++j)
      for (long long i = 0; i < samples; ++i) {
        try {
          docs.push_back(builder.eval_sample(books, n, int(j), depths[j], int(i), seed, int(digits)));
        } catch (const std::invalid_argument& e) {
          throw std::runtime_error(std::string("--text: ") + e.what() + " for a passkey document of length " +
                                   std::to_string(n));
        }
      }

  std::vector<std::int32_t> eos = m.tok.eos_ids();
  eos.insert(eos.end(), m.config.eos_token_ids.begin(), m.config.eos_token_ids.end());
  const auto is_eos = [&](std::int32_t t) { return std::find(eos.begin(), eos.end(), t) != eos.end(); };

  cpu_forward fwd(m.config, m.weights, common.threads);
  auto progress = make_eval_progress("eval passkey", std::int64_t(modes.size() * docs.size()), "documents");
  const std::size_t cells = lengths.size() * depths.size();
  std::vector<std::vector<cell_result>> results(modes.size(), std::vector<cell_result>(cells));
  std::vector<std::optional<specache_stats>> spec(modes.size());
  boost::json::array examples;  // the first mode's answers, to see what the model says
  // Every mode's answer to every document, for --documents.
  struct answer {
    std::vector<std::int32_t> ids;
    std::string text;
    bool correct = false;
  };
  std::vector<std::vector<answer>> answers(modes.size(), std::vector<answer>(docs.size()));
  std::vector<float> logits(std::size_t(m.config.vocab_size));
  for (std::size_t mi = 0; mi < modes.size(); ++mi) {
    for (std::size_t d = 0; d < docs.size(); ++d) {
      const auto& doc = docs[d];
      const std::int64_t length = std::int64_t(doc.prompt.size() + doc.answer.size()) + 1;
      auto session = make_eval_session(modes[mi], fwd, length, common.topk);
      session->prefill(doc.prompt, logits);
      std::vector<std::int32_t> generated;
      const std::size_t want = doc.answer.size() + 1;
      while (true) {
        const std::int32_t next = greedy_token(logits);
        if (is_eos(next)) break;
        generated.push_back(next);
        if (generated.size() == want) break;
        session->step(generated.back(), logits);
      }
      if (const auto* st = eval_session_stats(*session)) {
        if (!spec[mi]) spec[mi].emplace();
        spec[mi]->merge(*st);
      }
      const std::string text = m.tok.decode(generated);
      const bool ok = passkey_correct(text, doc.key);
      answers[mi][d] = {generated, text, ok};
      auto& cell = results[mi][d / std::size_t(samples)];
      cell.correct += ok;
      ++cell.samples;
      if (mi == 0 && d % std::size_t(samples) == 0)
        examples.push_back({{"length", length}, {"depth", doc.depth}, {"key", doc.key}, {"answer", text},
                            {"correct", ok}});
      progress->advance();
    }
  }
  progress->finish();

  std::vector<std::string> header{"mode", "length"};
  for (const double d : depths) header.push_back("d=" + format_fixed(100 * d, 0) + "%");
  header.push_back("mean");
  std::vector<std::vector<std::string>> rows;
  boost::json::array mode_results;
  std::vector<heatmap_panel> panels;
  for (std::size_t mi = 0; mi < modes.size(); ++mi) {
    heatmap_panel panel{modes[mi].label(), {lengths.begin(), lengths.end()}, depths,
                        std::vector<double>(cells)};
    boost::json::array cell_json;
    std::int64_t mode_correct = 0, mode_total = 0;
    for (std::size_t li = 0; li < lengths.size(); ++li) {
      std::vector<std::string> row{modes[mi].label(), std::to_string(lengths[li])};
      std::int64_t row_correct = 0, row_total = 0;
      for (std::size_t j = 0; j < depths.size(); ++j) {
        const auto& c = results[mi][li * depths.size() + j];
        const double acc = double(c.correct) / double(c.samples);
        panel.values[j * lengths.size() + li] = acc;
        row.push_back(format_fixed(100 * acc, 0) + "%");
        row_correct += c.correct;
        row_total += c.samples;
        cell_json.push_back({{"length", lengths[li]}, {"depth", depths[j]}, {"correct", c.correct},
                             {"samples", c.samples}, {"accuracy", acc}});
      }
      row.push_back(format_fixed(100.0 * double(row_correct) / double(row_total), 1) + "%");
      rows.push_back(std::move(row));
      mode_correct += row_correct;
      mode_total += row_total;
    }
    mode_results.push_back({{"mode", modes[mi].label()},
                            {"name", modes[mi].name},
                            {"bits", modes[mi].bits},
                            {"correct", mode_correct},
                            {"samples", mode_total},
                            {"accuracy", double(mode_correct) / double(mode_total)},
                            {"cells", std::move(cell_json)}});
    if (spec[mi]) mode_results.back().as_object()["specache"] = specache_json(*spec[mi]);
    panels.push_back(std::move(panel));
  }
  std::cout << "passkey retrieval: " << samples << " document(s) per cell, " << digits << "-digit keys, seed "
            << seed << "\n";
  print_table(std::cout, header, rows);
  for (std::size_t mi = 0; mi < modes.size(); ++mi)
    if (spec[mi]) std::cout << specache_line(modes[mi].label(), *spec[mi]) << "\n";

  if (vm.count("plot"))
    write_text_file(plot, render_heatmap_svg(panels, "passkey retrieval accuracy (" + m.dir.filename().string() +
                                                         ", " + std::to_string(samples) + " per cell)"));
  if (vm.count("documents")) {
    // One line per document: what it was built from, its ids, and what each mode answered.
    std::string lines;
    const auto ids_json = [](const std::vector<std::int32_t>& ids) {
      boost::json::array a;
      a.reserve(ids.size());
      for (const auto t : ids) a.push_back(t);
      return a;
    };
    for (std::size_t d = 0; d < docs.size(); ++d) {
      const auto& doc = docs[d];
      const std::size_t cell = d / std::size_t(samples);
      boost::json::object modes_json;
      for (std::size_t mi = 0; mi < modes.size(); ++mi) {
        const answer& an = answers[mi][d];
        modes_json[modes[mi].label()] = {{"ids", ids_json(an.ids)}, {"text", an.text}, {"correct", an.correct}};
      }
      const boost::json::object line{{"length", lengths[cell / depths.size()]},
                                     {"depth", doc.depth},
                                     {"sample", std::int64_t(d % std::size_t(samples))},
                                     {"key", doc.key},
                                     {"needle_at", doc.needle_at},
                                     {"prompt_ids", ids_json(doc.prompt)},
                                     {"answer_ids", ids_json(doc.answer)},
                                     {"answers", std::move(modes_json)}};
      lines += boost::json::serialize(line);
      lines += "\n";
    }
    write_text_file(documents_path, lines);
  }
  if (vm.count("json")) {
    boost::json::array len_json, depth_json;
    for (const auto n : lengths) len_json.push_back(n);
    for (const double d : depths) depth_json.push_back(d);
    write_json_file(common.json, {{"command", "eval passkey"},
                                  {"model", m.dir.string()},
                                  {"lengths", std::move(len_json)},
                                  {"depths", std::move(depth_json)},
                                  {"samples", samples},
                                  {"seed", seed},
                                  {"digits", digits},
                                  {"modes", std::move(mode_results)},
                                  {"examples", std::move(examples)}});
  }
  return 0;
}

}  // namespace specpipe::apps
