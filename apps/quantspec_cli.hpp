#pragma once
// The QuantSpec flags generate, bench and eval share: --gamma (N or auto; a
// list where a command sweeps it), the draft weights' group and whether
// lm_head is packed too, and the closing line of counters on stderr.
#include <cstdint>
#include <string>

#include "apps/cli_support.hpp"
#include "model/draft_weights.hpp"
#include "model/gamma_controller.hpp"
#include "model/spec_stats.hpp"

namespace specpipe::apps {

struct quantspec_flags {
  long long weight_group = 128;
  bool quantize_lm_head = false;
};

// --weight-group and --draft-lm-head.
void add_draft_flags(po::options_description& desc, quantspec_flags& flags);
// The draft weights the flags describe; usage_error on a bad group.
draft_options draft_options_of(const quantspec_flags& flags);

// --gamma's value ("5" or "auto") for a cache of group G: usage_error when
// it is malformed or a fixed gamma exceeds G (the draft's rows must roll back
// inside the 2G double buffer, model/quantspec.cpp).
gamma_options gamma_of(const std::string& text, std::int64_t group);

// The KV group G of a QuantSpec cache from --group (0: 128); usage_error
// unless a positive multiple of 8.
std::int64_t quantspec_group_of(long long group);

// "[quantspec: drafts .., accepted .. (..%), mean acceptance length .., kept by position ..; draft .. ms/step,
// verify .. ms/round, cost ratio ..]" on stderr.
void print_spec_line(const spec_decode_stats& stats);

}  // namespace specpipe::apps
