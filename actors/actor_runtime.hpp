#pragma once
// The project's one initialization point for CAF, and an actor system set up
// with it. CAF 0.17.6 assigns type IDs at compile time (actors/type_ids.hpp)
// and has no global meta-object table yet (caf/init_global_meta_objects.hpp
// is an empty transition header), so initialization there means registering
// the error category on the config; from CAF 0.18 on it also registers the
// type-ID block and the core module's meta objects.
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

namespace specpipe {

// Once per process, before the first actor system; idempotent.
void init_actor_types();

// Registers the project's error category (rendering pipeline_errc) on `cfg`.
void configure_actor_system(caf::actor_system_config& cfg);

// An actor system configured for the pipeline. Members in this order: the
// config must outlive the system.
class actor_runtime {
 public:
  actor_runtime();
  caf::actor_system& system() { return *sys_; }

 private:
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
};

}  // namespace specpipe
