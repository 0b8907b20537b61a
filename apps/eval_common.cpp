#include "apps/eval_common.hpp"

#include <boost/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace specpipe::apps {
namespace {

// Boost.JSON's serializer writes one line; evaluation results are read by
// people too, so indent objects and arrays (arrays of numbers stay on one line).
void pretty(std::ostream& os, const boost::json::value& v, int indent) {
  const std::string pad(std::size_t(indent) * 2, ' '), inner(std::size_t(indent + 1) * 2, ' ');
  if (v.is_object()) {
    const auto& o = v.get_object();
    if (o.empty()) { os << "{}"; return; }
    os << "{\n";
    bool first = true;
    for (const auto& kv : o) {
      if (!first) os << ",\n";
      first = false;
      os << inner << boost::json::serialize(boost::json::value(kv.key())) << ": ";
      pretty(os, kv.value(), indent + 1);
    }
    os << "\n" << pad << "}";
  } else if (v.is_array()) {
    const auto& a = v.get_array();
    const bool flat = std::all_of(a.begin(), a.end(), [](const auto& e) { return !e.is_structured(); });
    if (flat) { os << boost::json::serialize(v); return; }
    os << "[\n";
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (i) os << ",\n";
      os << inner;
      pretty(os, a[i], indent + 1);
    }
    os << "\n" << pad << "]";
  } else {
    os << boost::json::serialize(v);
  }
}

}  // namespace

void add_eval_common_flags(po::options_description& desc, eval_common_flags& f) {
  desc.add_options()
    ("model,m", po::value(&f.model), "Hugging Face checkpoint directory (default: the embedded model)")
    ("text", po::value(&f.texts)->multitoken()->composing(), "text file(s) to evaluate on (repeatable)")
    ("kv", po::value(&f.kv)->default_value("full"), "cache modes to compare: MODE[:BITS],... (e.g. full,kivi:2)")
    ("kv-bits", po::value(&f.kv_bits)->default_value(0), "bits of a mode given without :BITS (0: each format's default: kivi 2, specache 1, hier 8)")
    ("threads", po::value(&f.threads)->default_value(0), "CPU threads; 0 = all cores")
    ("topk", po::value(&f.topk)->default_value(64), "specache: 16-bit rows fetched per layer and KV head")
    ("json", po::value(&f.json), "write the results as JSON to this file");
}

void require_positive(const char* flag, long long value) {
  if (value <= 0) throw usage_error(std::string("--") + flag + ": must be > 0, got " + std::to_string(value));
}

void check_output_path(const char* flag, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) throw usage_error(std::string("--") + flag + ": empty file name");
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec))
    throw usage_error(std::string("--") + flag + ": folder '" + parent.string() + "' of '" + path +
                      "' does not exist");
}

std::vector<eval_mode> check_eval_common_flags(const eval_common_flags& f, const po::variables_map& vm,
                                               bool need_text) {
  if (f.threads < 0) throw usage_error("--threads: must be >= 0, got " + std::to_string(f.threads));
  if (f.kv_bits < 0 || f.kv_bits > 16)
    throw usage_error("--kv-bits: must be in [0, 16] (0: the format's default), got " + std::to_string(f.kv_bits));
  if (f.topk < 1) throw usage_error("--topk: must be >= 1, got " + std::to_string(f.topk));
  if (need_text && f.texts.empty()) throw usage_error("--text: at least one text file is required");
  if (vm.count("json")) check_output_path("json", f.json);
  return parse_eval_modes(f.kv, f.kv_bits);
}

eval_window_shape eval_window_of(const model_config& config, const tokenizer& tok, long long context, long long tokens) {
  const std::int64_t positions = context + tokens;
  if (positions > config.max_position_embeddings)
    throw usage_error("--context + --tokens: " + std::to_string(positions) + " positions exceed the model's " +
                      std::to_string(config.max_position_embeddings));
  eval_window_shape w;
  if (const auto id = tok.bos_id(); id && tok.add_bos_default()) w.bos.push_back(*id);
  if (context <= std::int64_t(w.bos.size()))
    throw usage_error("--context: must exceed the " + std::to_string(w.bos.size()) + " BOS token(s), got " +
                      std::to_string(context));
  w.text_tokens = context - std::int64_t(w.bos.size()) + tokens;
  return w;
}

std::vector<eval_text> load_eval_texts(const std::vector<std::string>& files, const tokenizer& tok) {
  std::vector<eval_text> out;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in || std::filesystem::is_directory(file))
      throw std::runtime_error("--text: cannot read '" + file + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw std::runtime_error("--text: error reading '" + file + "'");
    eval_text t{file, tok.encode(ss.str(), false)};
    if (t.tokens.empty()) throw std::runtime_error("--text: '" + file + "' is empty (no tokens)");
    out.push_back(std::move(t));
  }
  return out;
}

void teacher_forced(decode_session& session, std::int64_t vocab, std::span<const std::int32_t> prefill,
                    std::span<const std::int32_t> targets,
                    const std::function<void(std::size_t, std::span<const float>)>& on_logits,
                    progress_meter* progress) {
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  session.prefill(prefill, logits);
  if (progress) progress->advance();
  for (std::size_t i = 0; i < targets.size(); ++i) {
    on_logits(i, logits);
    if (i + 1 == targets.size()) break;
    session.step(targets[i], logits);
    if (progress) progress->advance();
  }
}

std::unique_ptr<progress_meter> make_eval_progress(const std::string& label, std::int64_t total,
                                                   const std::string& unit) {
  return std::make_unique<progress_meter>(std::cerr, label, total, ::isatty(STDERR_FILENO) == 1, unit);
}

void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& r : rows)
    for (std::size_t c = 0; c < r.size() && c < width.size(); ++c) width[c] = std::max(width[c], r[c].size());
  auto line = [&](const std::vector<std::string>& cells) {
    for (std::size_t c = 0; c < width.size(); ++c) {
      const std::string s = c < cells.size() ? cells[c] : "";
      const std::string fill(width[c] - s.size(), ' ');
      out << (c ? "  " : "") << (c ? fill + s : s + fill);
    }
    out << "\n";
  };
  line(header);
  std::size_t total = 0;
  for (const auto w : width) total += w;
  out << std::string(total + 2 * (width.size() - 1), '-') << "\n";
  for (const auto& r : rows) line(r);
}

std::string format_fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

boost::json::value specache_json(const specache_stats& s) {
  return {{"steps", s.steps},           {"topk_needed", s.needed},        {"topk_hits", s.hits},
          {"topk_hit_rate", s.hit_rate()}, {"guesses", s.guesses},        {"guess_hits", s.guess_hits},
          {"guess_rate", s.guess_rate()}, {"rows_fetched", s.rows_fetched}, {"bytes_fetched", s.bytes_fetched}};
}

std::string specache_line(const std::string& label, const specache_stats& s) {
  return label + ": top-k hit rate " + format_fixed(100 * s.hit_rate(), 1) + "% (" + std::to_string(s.hits) + " of " +
         std::to_string(s.needed) + " rows), speculative token matched " + format_fixed(100 * s.guess_rate(), 1) +
         "%, " + format_fixed(s.steps > 0 ? double(s.bytes_fetched) / double(s.steps) / 1024.0 : 0, 1) +
         " KiB fetched per step";
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write '" + path + "'");
  out << text;
  out.close();
  if (!out) throw std::runtime_error("error writing '" + path + "'");
}

void write_json_file(const std::string& path, const boost::json::value& value) {
  std::ostringstream ss;
  pretty(ss, value, 0);
  ss << "\n";
  write_text_file(path, ss.str());
}

}  // namespace specpipe::apps
