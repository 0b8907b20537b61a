#include "apps/quantspec_cli.hpp"

#include <cstdio>

#include "model/kv_mode.hpp"

namespace specpipe::apps {

void add_draft_flags(po::options_description& desc, quantspec_flags& f) {
  desc.add_options()
    ("weight-group", po::value(&f.weight_group)->default_value(128),
     "quantspec: input columns per scale and zero of the 4-bit draft weights")
    ("draft-lm-head", po::bool_switch(&f.quantize_lm_head),
     "quantspec: pack lm_head to 4 bits too (default: the draft shares the target's)");
}

draft_options draft_options_of(const quantspec_flags& f) {
  if (f.weight_group < 2 || f.weight_group > 1024 || f.weight_group % 2 != 0)
    throw usage_error("--weight-group: must be even and in [2, 1024], got " + std::to_string(f.weight_group));
  draft_options o;
  o.group = f.weight_group;
  o.quantize_lm_head = f.quantize_lm_head;
  return o;
}

std::int64_t quantspec_group_of(long long group) {
  try {
    return parse_kv_mode("hier", 8, group, 0).group;
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
}

gamma_options gamma_of(const std::string& text, std::int64_t group) {
  gamma_options g;
  try {
    g = parse_gamma(text);
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
  if (!g.adaptive && g.gamma > group)
    throw usage_error("--gamma: " + std::to_string(g.gamma) + " exceeds --group " + std::to_string(group) +
                      " (rejected drafts must roll back inside the 2G full-precision buffer)");
  if (g.max_gamma > group) g.max_gamma = int(group);
  if (g.gamma > g.max_gamma) g.gamma = g.max_gamma;
  return g;
}

void print_spec_line(const spec_decode_stats& s) {
  const double draft_ms = s.draft_tokens > 0 ? 1e3 * s.draft_seconds / double(s.draft_tokens) : 0;
  const double verify_ms = s.drafts > 0 ? 1e3 * s.verify_seconds / double(s.drafts) : 0;
  std::fprintf(stderr, "[quantspec: %s; draft %.2f ms/step, verify %.2f ms/round, cost ratio %.2f]\n",
               s.summary().c_str(), draft_ms, verify_ms, verify_ms > 0 ? draft_ms / verify_ms : 0.0);
}

}  // namespace specpipe::apps
