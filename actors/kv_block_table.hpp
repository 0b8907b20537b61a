#pragma once
// Block bookkeeping for the host KV store: which fixed-size blocks of rows
// belong to which (sequence, layer, KV head) stream, and where a token's row
// lives. Pure logic, no memory: the KV store lays its pinned arena out by it.
//
// Every stream of a sequence is a list of blocks of `block_tokens` rows, so
// one token's row of one (layer, head) is contiguous, and so are runs of
// neighbouring tokens (the gather coalesces them). All streams of a sequence
// grow together: appending n tokens extends each of layers x heads streams.
// Allocation is all-or-nothing against a fixed budget of blocks. A sequence
// may reserve capacity up front (reserve): its blocks are taken from the
// budget at once, so later appends within the reservation cannot fail.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/ids.hpp"

namespace specpipe {

struct kv_block_table_config {
  int n_layers = 0;
  int n_kv_heads = 0;
  std::int64_t block_tokens = 16;
  std::int64_t total_blocks = 0;  // the budget
};

struct kv_table_usage {
  std::int64_t blocks_used = 0;
  std::int64_t blocks_total = 0;
  std::int64_t sequences = 0;
  std::int64_t tokens = 0;  // over all sequences
  std::int64_t blocks_reserved = 0;  // taken by reservations, holding no token yet
};

// The budget cannot hold an append; says how much was needed and free.
class kv_budget_error : public std::runtime_error {
 public:
  kv_budget_error(seq_id seq, std::int64_t needed, std::int64_t free_blocks, std::int64_t total,
                  const std::string& what)
      : std::runtime_error(what), seq_(seq), needed_(needed), free_(free_blocks), total_(total) {}
  seq_id seq() const { return seq_; }
  std::int64_t needed_blocks() const { return needed_; }
  std::int64_t free_blocks() const { return free_; }
  std::int64_t total_blocks() const { return total_; }

 private:
  seq_id seq_;
  std::int64_t needed_, free_, total_;
};

class kv_block_table {
 public:
  explicit kv_block_table(const kv_block_table_config& config);

  const kv_block_table_config& config() const { return config_; }
  std::int64_t streams() const { return std::int64_t(config_.n_layers) * config_.n_kv_heads; }

  // Blocks an append of n tokens to `seq` would take (0 when they fit the
  // blocks it holds, reserved ones included).
  std::int64_t blocks_needed(seq_id seq, std::int64_t n) const;

  // Makes sure `seq` (created on first use) holds blocks for `tokens`
  // tokens in every stream, taking what is missing from the budget now.
  // Returns the blocks taken (0 when it already holds enough). Throws
  // kv_budget_error, leaving the table unchanged, when the budget cannot.
  std::int64_t reserve(seq_id seq, std::int64_t tokens);

  // Tokens `seq` can hold without taking more blocks (0 when unknown).
  std::int64_t capacity(seq_id seq) const;

  // Makes room for n more tokens in every stream of `seq` (creating the
  // sequence on first use) and returns the position of the first one.
  // Throws kv_budget_error, leaving the table unchanged, when the budget
  // cannot hold them.
  std::int64_t append(seq_id seq, std::int64_t n);

  // Global row of (seq, layer, head, pos) in the arena: block * block_tokens
  // + pos % block_tokens. Throws std::out_of_range naming what is wrong.
  std::int64_t row(seq_id seq, int layer, int head, std::int64_t pos) const;

  bool contains(seq_id seq) const { return seqs_.count(seq) > 0; }
  std::int64_t length(seq_id seq) const;  // 0 for unknown sequences

  // Returns the sequence's blocks to the budget; the number freed (0 when
  // the sequence is unknown).
  std::int64_t free(seq_id seq);

  kv_table_usage usage() const;

 private:
  struct sequence_blocks {
    std::int64_t tokens = 0;
    // Block k of stream s is blocks[k * streams() + s]. Reserved blocks sit
    // at the end, in the same order, beyond those the tokens fill.
    std::vector<std::int64_t> blocks;
  };

  kv_block_table_config config_;
  std::int64_t blocks_for(std::int64_t tokens) const;
  // Throws kv_budget_error naming `what` when `need` blocks are not free.
  void check_budget(seq_id seq, std::int64_t need, const std::string& what) const;
  // Moves `need` blocks from the free list to the end of `s.blocks`.
  void take(sequence_blocks& s, std::int64_t need);

  std::unordered_map<seq_id, sequence_blocks> seqs_;
  std::vector<std::int64_t> free_list_;  // popped from the back
  std::int64_t tokens_ = 0;
};

}  // namespace specpipe
