#pragma once
// The top-k policy of SpeCache (DESIGN.md): per layer and KV head, the
// speculative row's softmax probabilities are averaged over the query heads
// of the GQA group, its own position is excluded, and the k most attended
// positions are fetched for the next step. Keeps the hit statistics: of the
// rows a step needed (the real query's top-k), the share already fetched.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "actors/ids.hpp"

namespace specpipe {

// Attention probabilities of one speculative query over a sequence's cache.
// probs is [n_layers][n_kv_heads][group][n_positions] (group = query heads
// per KV head).
struct spec_scores {
  seq_id seq = 0;
  int n_layers = 0;
  int n_kv_heads = 0;
  int group = 1;
  std::int64_t n_positions = 0;
  std::int64_t query_position = -1;  // excluded from the top-k
  std::vector<float> probs;
};

// Positions chosen for one (layer, KV head), ascending.
struct topk_selection {
  int layer = 0;
  int kv_head = 0;
  std::vector<std::int64_t> positions;
};

struct topk_hit_stats {
  std::int64_t needed = 0;  // rows steps asked for
  std::int64_t hits = 0;    // of those, already fetched
  double hit_rate() const { return needed > 0 ? double(hits) / double(needed) : 0.0; }
};

// The k positions with the largest group-averaged probability, ascending;
// ties go to the lower position. `scores` is [group][n_positions].
std::vector<std::int64_t> topk_positions(std::span<const float> scores, int group,
                                         std::int64_t n_positions, std::int64_t exclude, int k);

class topk_planner {
 public:
  explicit topk_planner(int k);

  int k() const { return k_; }

  // One selection per (layer, KV head), in layer-major order; remembers them
  // as the sequence's fetched set. Throws std::invalid_argument when the
  // scores' size disagrees with their shape.
  std::vector<topk_selection> plan(const spec_scores& scores);

  // A step needed `needed` rows of `seq`: counts how many were in the last
  // plan for it, and returns this step's figures.
  topk_hit_stats record_needed(seq_id seq, std::span<const topk_selection> needed);

  void forget(seq_id seq) {
    fetched_.erase(seq);
    heads_.erase(seq);
  }
  const topk_hit_stats& totals() const { return totals_; }

 private:
  int k_;
  // seq -> per stream (layer * heads + head) the fetched positions, ascending.
  std::unordered_map<seq_id, std::vector<std::vector<std::int64_t>>> fetched_;
  std::unordered_map<seq_id, int> heads_;
  topk_hit_stats totals_;
};

}  // namespace specpipe
