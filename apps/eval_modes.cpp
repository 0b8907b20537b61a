#include "apps/eval_modes.hpp"

#include <algorithm>

#include "apps/cli_support.hpp"
#include "model/kv_mode.hpp"
#include "model/specache_session.hpp"

namespace specpipe::apps {

std::string eval_mode::label() const { return bits > 0 ? name + ":" + std::to_string(bits) : name; }

std::vector<eval_mode> parse_eval_modes(const std::string& text, int default_bits) {
  std::vector<eval_mode> modes;
  std::size_t pos = 0;
  while (true) {
    const std::size_t comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (item.empty()) throw usage_error("--kv: '" + text + "' has an empty mode (expected MODE[:BITS],...)");
    eval_mode m;
    const std::size_t colon = item.find(':');
    m.name = item.substr(0, colon);
    if (m.name.empty()) throw usage_error("--kv: '" + item + "' has no mode name");
    // Full precision has no bit width; every other mode takes :bits or --kv-bits.
    if (colon != std::string::npos) {
      const std::string b = item.substr(colon + 1);
      std::size_t used = 0;
      int v = 0;
      try {
        v = std::stoi(b, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (b.empty() || used != b.size() || v < 1 || v > 16)
        throw usage_error("--kv: '" + item + "': bits must be an integer in [1, 16], got '" + b + "'");
      if (m.name == "full") throw usage_error("--kv: 'full' keeps 32-bit rows and takes no bits, got '" + item + "'");
      m.bits = v;
    } else if (m.name != "full") {
      m.bits = default_bits;
    }
    const auto same = [&](const eval_mode& o) { return o.label() == m.label(); };
    if (std::any_of(modes.begin(), modes.end(), same))
      throw usage_error("--kv: mode '" + m.label() + "' is listed twice");
    modes.push_back(m);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return modes;
}

namespace {

// The kv_mode behind an eval mode name and whether it is a SpeCache session.
struct resolved_mode {
  kv_mode kv;
  bool session = false;  // specache with 16-bit rows (else a plain cache)
};

resolved_mode resolve(const eval_mode& mode, int topk) {
  // The same formats and defaults as generate's --kv (model/kv_mode.hpp).
  std::string name = mode.name;
  std::string prefetch = "speculative";
  bool session = name == "specache";
  if (name == "specache-output") {
    name = "specache";
    prefetch = "output";
    session = true;
  } else if (name == "specache-nofetch") {
    name = "specache";
  }
  resolved_mode r;
  try {
    r.kv = parse_kv_mode(name, mode.bits, 0, 0);
    if (session) set_specache_flags(r.kv, topk, prefetch);
  } catch (const std::invalid_argument& e) {
    throw usage_error(std::string("--kv: ") + mode.label() + ": " + e.what());
  }
  r.session = session;
  return r;
}

}  // namespace

void check_eval_mode(const eval_mode& mode) { resolve(mode, 64); }

std::unique_ptr<decode_session> make_eval_session(const eval_mode& mode, cpu_forward& fwd, std::int64_t max_tokens,
                                                  int topk) {
  const resolved_mode r = resolve(mode, topk);
  if (r.session) return std::make_unique<specache_session>(fwd, specache_config_of(r.kv), max_tokens);
  return make_cache_session(fwd, make_kv_cache(r.kv, fwd.config(), max_tokens, &fwd.pool()));
}

const specache_stats* eval_session_stats(const decode_session& session) {
  const auto* s = dynamic_cast<const specache_session*>(&session);
  return s ? &s->stats() : nullptr;
}

}  // namespace specpipe::apps
