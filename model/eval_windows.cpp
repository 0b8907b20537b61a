#include "model/eval_windows.hpp"

#include <stdexcept>
#include <string>

namespace specpipe {

std::vector<std::int64_t> eval_window_starts(std::int64_t total, std::int64_t window, std::int64_t count) {
  if (window <= 0 || count <= 0)
    throw std::invalid_argument("eval windows: window (" + std::to_string(window) + ") and count (" +
                                std::to_string(count) + ") must be positive");
  if (total < window * count)
    throw std::invalid_argument("holds " + std::to_string(total) + " tokens, " + std::to_string(count) +
                                " window(s) of " + std::to_string(window) + " need " +
                                std::to_string(window * count));
  // The slack (tokens left over) is shared out as equal gaps between windows.
  const std::int64_t slack = total - window * count;
  std::vector<std::int64_t> starts;
  starts.reserve(std::size_t(count));
  for (std::int64_t k = 0; k < count; ++k)
    starts.push_back(k * window + (count > 1 ? k * slack / (count - 1) : 0));
  return starts;
}

}  // namespace specpipe
