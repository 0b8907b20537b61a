#include "actors/step_compute.hpp"

#include <stdexcept>
#include <string>

#include "actors/trace_event.hpp"

namespace specpipe {

void check_step_entry(const step_entry& e, std::int64_t cache_length, std::int64_t max_context) {
  if (cache_length != e.pos0)
    throw std::runtime_error("step at position " + std::to_string(e.pos0) + " but the cache holds " +
                             std::to_string(cache_length) + " tokens");
  const std::int64_t end = e.pos0 + std::int64_t(e.tokens.size());
  if (end > max_context)
    throw std::runtime_error(std::to_string(end) + " tokens exceed the cache of " + std::to_string(max_context));
}

void step_compute::run_batch(std::span<const step_entry> entries, std::span<step_output> outs) {
  for (std::size_t i = 0; i < entries.size(); ++i) {
    step_output& out = outs[i];
    if (!out.error.empty()) continue;
    out.compute_start_us = trace_now_us();
    try {
      run(entries[i], out);
    } catch (const std::exception& ex) {
      out.error = ex.what();
    }
    out.compute_end_us = trace_now_us();
    out.compute_us = out.compute_end_us - out.compute_start_us;
  }
}

}  // namespace specpipe
