#include "actors/actor_runtime.hpp"

#include <mutex>

#include <caf/config.hpp>
#include <caf/init_global_meta_objects.hpp>

#include "actors/pipeline_error.hpp"
#include "actors/type_ids.hpp"

namespace specpipe {

void init_actor_types() {
  static std::once_flag once;
  std::call_once(once, [] {
#if CAF_VERSION >= 1800
    caf::init_global_meta_objects<caf::id_block::specpipe>();
    caf::core::init_global_meta_objects();
#endif
  });
}

void configure_actor_system(caf::actor_system_config& cfg) {
  // Work sharing: idle threads sleep on one queue's condition variable. The
  // default work stealing keeps them polling first, which on a small machine
  // takes cores from the forward's own threads (actors/NOTES.md).
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.add_error_category(caf::atom("specpipe"), [](std::uint8_t code, caf::atom_value, const caf::message& ctx) {
    std::string s = to_string(static_cast<pipeline_errc>(code));
    if (ctx.match_elements<std::string>()) s += ": " + ctx.get_as<std::string>(0);
    return s;
  });
}

actor_runtime::actor_runtime() {
  init_actor_types();
  configure_actor_system(cfg_);
  sys_ = std::make_unique<caf::actor_system>(cfg_);
}

}  // namespace specpipe
