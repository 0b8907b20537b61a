#pragma once
// The top-k policy of SpeCache (DESIGN.md): per layer and KV head, the
// speculative row's softmax probabilities are averaged over the query heads
// of the GQA group, its own position is excluded, and the k most attended
// positions are fetched for the next step. (Hit statistics are counted where
// both the fetched and the needed rows are known: in the worker's compute.)
#include <cstdint>
#include <span>
#include <vector>

#include "actors/ids.hpp"

namespace specpipe {

// Attention probabilities of one speculative query over a sequence's cache.
// probs is [n_layers][n_kv_heads][group][n_positions] (group = query heads
// per KV head), for layers layer0 .. layer0 + n_layers - 1; n_positions is
// the number of candidate positions 0 .. n_positions - 1.
struct spec_scores {
  seq_id seq = 0;
  int layer0 = 0;
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

// What the planner has done, for reports.
struct planner_stats {
  std::int64_t plans = 0;   // selections made (one per layer and step)
  std::int64_t rows = 0;    // rows gathered
  std::int64_t bytes = 0;
  std::int64_t failed = 0;  // plans whose resolve or gather failed
};

// The k positions with the largest group-averaged probability, ascending;
// ties go to the lower position. `scores` is [group][n_positions].
std::vector<std::int64_t> topk_positions(std::span<const float> scores, int group,
                                         std::int64_t n_positions, std::int64_t exclude, int k);

class topk_planner {
 public:
  explicit topk_planner(int k);

  int k() const { return k_; }

  // One selection per (layer, KV head), in layer-major order, numbered from
  // scores.layer0. Throws std::invalid_argument when the scores' size
  // disagrees with their shape.
  std::vector<topk_selection> plan(const spec_scores& scores) const;

 private:
  int k_;
};

}  // namespace specpipe
