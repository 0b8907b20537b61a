#pragma once
// SpeCache driven synchronously (no actors): the 16-bit rows live in this
// object's host memory, the top-k is chosen and the rows copied inline. Used
// by `specpipe eval` and by the tests that pin the method down (with k at
// least the context the output equals the full cache's); the actor pipeline
// runs the same specache_cache with the store, planner and transfer engine
// in place of this class's inline link (actors/specache_step_compute.hpp).
//
// Decode steps (DESIGN.md): the first step pre-decodes its token alone (its
// attention seeds the first top-k set, its output is the first speculative
// token), then every step is the two-row forward [T_t, T'_{t+1}] reading the
// rows the previous step's speculative row chose. With prefetch `output` a
// step is one row whose own low-bit attention picks the rows it then reads.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/decode_session.hpp"
#include "model/specache_cache.hpp"
#include "model/specache_stats.hpp"

namespace specpipe {

enum class specache_prefetch : std::uint8_t { speculative, output };

struct specache_config {
  specache_options cache;  // bits, G, R, exact-key tracking
  int topk = 64;
  specache_prefetch prefetch = specache_prefetch::speculative;
};

class specache_session final : public decode_session {
 public:
  // Room for max_tokens tokens. `fwd` must outlive the session.
  specache_session(cpu_forward& fwd, const specache_config& config, std::int64_t max_tokens);
  ~specache_session() override;

  std::int64_t length() const override;
  void prefill(std::span<const std::int32_t> tokens, std::span<float> logits) override;
  void step(std::int32_t token, std::span<float> logits) override;

  const specache_stats& stats() const;
  const specache_cache& cache() const { return *cache_; }
  // Bytes of 16-bit rows this session's host store holds.
  std::size_t host_bytes() const;

 private:
  class host_link;
  void store_fresh();
  void predecode(std::int32_t token);

  cpu_forward& fwd_;
  specache_config config_;
  std::unique_ptr<specache_cache> cache_;
  std::unique_ptr<host_link> link_;
  std::vector<float> logits2_;  // [2, vocab] of a two-row step
  bool have_spec_ = false;
  std::int32_t spec_token_ = 0;
  std::int64_t guess_pos_ = -1;  // position the last speculative token ran at
  std::int32_t guess_token_ = 0;
};

}  // namespace specpipe
