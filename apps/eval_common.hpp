#pragma once
// What the `specpipe eval` subcommands share: the flags every one takes,
// reading and tokenizing the texts, the teacher-forced scoring loop, the
// progress meter, the table and the JSON file.
#include <boost/json/value.hpp>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "apps/cli_support.hpp"
#include "apps/eval_modes.hpp"
#include "model/eval_progress.hpp"
#include "model/forward.hpp"
#include "model/tokenizer.hpp"

namespace specpipe::apps {

struct eval_common_flags {
  std::string model;
  std::vector<std::string> texts;
  std::string kv = "full";
  int kv_bits = 2;
  int threads = 0;
  int topk = 64;  // SpeCache's rows per (layer, KV head)
  std::string json;
};

void add_eval_common_flags(po::options_description& desc, eval_common_flags& flags);

// Checks the shared flags (threads, bits, output folder) and parses --kv.
// Throws usage_error.
std::vector<eval_mode> check_eval_common_flags(const eval_common_flags& flags, const po::variables_map& vm,
                                               bool need_text);

// A positive integer flag, or usage_error naming it.
void require_positive(const char* flag, long long value);

// Fails fast (usage_error) when the folder of an output file does not exist,
// rather than after a run of minutes.
void check_output_path(const char* flag, const std::string& path);

struct eval_text {
  std::string file;
  std::vector<std::int32_t> tokens;  // the whole text, without special tokens
};

// Reads and encodes each file; a file that cannot be read or is empty throws
// std::runtime_error naming it (exit 1).
// The shape of one teacher-forced window (ppl and agree): the BOS the
// tokenizer adds, and how many text tokens follow it (context - BOS + tokens).
// Checks that context + tokens fit the model and that context exceeds the BOS.
struct eval_window_shape {
  std::vector<std::int32_t> bos;
  std::int64_t text_tokens = 0;
};
eval_window_shape eval_window_of(const model_config& config, const tokenizer& tok, long long context, long long tokens);

std::vector<eval_text> load_eval_texts(const std::vector<std::string>& files, const tokenizer& tok);

// Teacher forcing over one window: runs `prefill`, then each target but the
// last as a decode step, so the cache mode is used exactly as in generation.
// on_logits(i, logits) sees the distribution that predicts targets[i]; the
// progress meter advances once per step.
void teacher_forced(decode_session& session, std::int64_t vocab, std::span<const std::int32_t> prefill,
                    std::span<const std::int32_t> targets,
                    const std::function<void(std::size_t, std::span<const float>)>& on_logits,
                    progress_meter* progress);

// A meter on stderr: redrawn in place on a terminal, a line per 10% otherwise.
std::unique_ptr<progress_meter> make_eval_progress(const std::string& label, std::int64_t total,
                                                   const std::string& unit = "forwards");

// Column-aligned table, first column left-aligned, the others right-aligned.
void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows);

std::string format_fixed(double v, int decimals);

// SpeCache's figures of a mode, for the JSON, and a line for the table's
// footer ("" for modes without them).
boost::json::value specache_json(const specache_stats& s);
std::string specache_line(const std::string& label, const specache_stats& s);

// Writes `value` pretty-printed; std::runtime_error naming the file on failure.
void write_json_file(const std::string& path, const boost::json::value& value);
void write_text_file(const std::string& path, const std::string& text);

}  // namespace specpipe::apps
