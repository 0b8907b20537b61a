#pragma once
// The tracer: the one owner of the trace buffer. Everyone sends it timeline
// events; it writes the Chrome trace on flush and when it exits.
#include <filesystem>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/type_ids.hpp"

namespace specpipe {

using tracer_actor = caf::typed_actor<
    caf::reacts_to<trace_atom, trace_event>,
    // Writes the file now; replies with the number of events written.
    caf::replies_to<flush_atom>::with<std::uint64_t>>;

// `path` empty: events are kept and flush writes nothing (tests read them
// through flush's count only). Written again at exit when events arrived
// after the last flush.
tracer_actor spawn_tracer(caf::actor_system& sys, std::filesystem::path path);

// What an actor holds to report events: disabled by default, and when
// disabled it sends nothing; call sites test it before building an event
// (`if (trace_) trace_.span(...)`), so tracing off costs one branch.
class trace_sink {
 public:
  trace_sink() = default;
  explicit trace_sink(tracer_actor t) : tracer_(std::move(t)), enabled_(bool(tracer_)) {}

  explicit operator bool() const { return enabled_; }

  void span(const std::string& track, const char* name, const char* cat, double t0_us, double t1_us,
            std::vector<std::pair<std::string, double>> args = {}) const;
  void flow(trace_phase phase, const std::string& track, const char* name, flow_id id, double ts_us) const;
  void counter(const std::string& track, const char* name, std::vector<std::pair<std::string, double>> values) const;
  void send(trace_event e) const;

 private:
  tracer_actor tracer_;
  bool enabled_ = false;
};

}  // namespace specpipe
