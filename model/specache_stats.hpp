#pragma once
// The two figures that say how well SpeCache's speculation works (DESIGN.md),
// plus what it moved: the top-k hit rate (of the rows the real query would
// pick with the exact 16-bit keys, the share the speculative row had already
// fetched) and the speculative token's exact-match rate with the next real
// token.
#include <cstdint>

namespace specpipe {

struct specache_stats {
  std::int64_t steps = 0;         // decode steps (two-row or output forwards)
  std::int64_t needed = 0;        // top-k rows the real queries needed
  std::int64_t hits = 0;          // of those, already fetched
  std::int64_t guesses = 0;       // speculative tokens checked against the next real token
  std::int64_t guess_hits = 0;    // of those, equal
  std::int64_t rows_fetched = 0;  // 16-bit rows brought from the host store
  std::int64_t bytes_fetched = 0;

  double hit_rate() const { return needed > 0 ? double(hits) / double(needed) : 0.0; }
  double guess_rate() const { return guesses > 0 ? double(guess_hits) / double(guesses) : 0.0; }
  void merge(const specache_stats& o) {
    steps += o.steps;
    needed += o.needed;
    hits += o.hits;
    guesses += o.guesses;
    guess_hits += o.guess_hits;
    rows_fetched += o.rows_fetched;
    bytes_fetched += o.bytes_fetched;
  }
};

}  // namespace specpipe
