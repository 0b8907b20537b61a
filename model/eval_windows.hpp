#pragma once
// Where `specpipe eval` reads its scoring windows from a tokenized text:
// `count` non-overlapping windows of `window` tokens, spread evenly from the
// start to the end of the text, so the choice is deterministic and covers
// more than the book's opening pages.
#include <cstdint>
#include <vector>

namespace specpipe {

// Start offsets, ascending: start_k = floor(k * (total - count*window) / (count-1)) + k*window
// (one window starts at 0). Throws std::invalid_argument when the text is
// shorter than count*window or a size is not positive.
std::vector<std::int64_t> eval_window_starts(std::int64_t total, std::int64_t window, std::int64_t count);

}  // namespace specpipe
