#include "actors/tracer.hpp"

#include <iostream>

#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/trace_buffer.hpp"

namespace specpipe {
namespace {

struct tracer_state {
  static inline const char* name = "specpipe.tracer";
  trace_buffer buffer;
  std::filesystem::path path;
  std::size_t written = 0;  // events in the file already

  void write() {
    if (path.empty()) return;
    buffer.write_file(path);
    written = buffer.size();
  }

  // The trace of a run that ends without a flush is still written.
  ~tracer_state() {
    if (path.empty() || buffer.size() == written) return;
    try {
      write();
    } catch (const std::exception& e) {
      std::cerr << "specpipe: " << e.what() << "\n";
    }
  }
};

tracer_actor::behavior_type tracer_behavior(tracer_actor::stateful_pointer<tracer_state> self,
                                            std::filesystem::path path) {
  self->state.path = std::move(path);
  return {
      [self](trace_atom, trace_event& e) { self->state.buffer.add(std::move(e)); },
      [self](flush_atom) -> caf::result<std::uint64_t> {
        try {
          self->state.write();
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error, std::string(e.what()));
        }
        return std::uint64_t(self->state.buffer.size());
      },
  };
}

}  // namespace

tracer_actor spawn_tracer(caf::actor_system& sys, std::filesystem::path path) {
  return sys.spawn(tracer_behavior, std::move(path));
}

void trace_sink::send(trace_event e) const {
  if (enabled_) caf::anon_send(tracer_, trace_atom_v, std::move(e));
}

void trace_sink::span(const std::string& track, const char* name, const char* cat, double t0_us, double t1_us,
                      std::vector<std::pair<std::string, double>> args) const {
  if (!enabled_) return;
  trace_event e;
  e.phase = trace_phase::span;
  e.track = track;
  e.name = name;
  e.cat = cat;
  e.ts_us = t0_us;
  e.dur_us = t1_us > t0_us ? t1_us - t0_us : 0;
  e.values = std::move(args);
  send(std::move(e));
}

void trace_sink::flow(trace_phase phase, const std::string& track, const char* name, flow_id id, double ts_us) const {
  if (!enabled_) return;
  trace_event e;
  e.phase = phase;
  e.track = track;
  e.name = name;
  e.cat = trace_cat::transfer;
  e.ts_us = ts_us;
  e.id = id;
  send(std::move(e));
}

void trace_sink::counter(const std::string& track, const char* name,
                         std::vector<std::pair<std::string, double>> values) const {
  if (!enabled_) return;
  trace_event e;
  e.phase = trace_phase::counter;
  e.track = track;
  e.name = name;
  e.ts_us = trace_now_us();
  e.values = std::move(values);
  send(std::move(e));
}

}  // namespace specpipe
