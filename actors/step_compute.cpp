#include "actors/step_compute.hpp"

#include <stdexcept>
#include <string>

namespace specpipe {

void check_step_entry(const step_entry& e, std::int64_t cache_length, std::int64_t max_context) {
  if (cache_length != e.pos0)
    throw std::runtime_error("step at position " + std::to_string(e.pos0) + " but the cache holds " +
                             std::to_string(cache_length) + " tokens");
  const std::int64_t end = e.pos0 + std::int64_t(e.tokens.size());
  if (end > max_context)
    throw std::runtime_error(std::to_string(end) + " tokens exceed the cache of " + std::to_string(max_context));
}

}  // namespace specpipe
