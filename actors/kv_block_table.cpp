#include "actors/kv_block_table.hpp"

#include <algorithm>

namespace specpipe {

kv_block_table::kv_block_table(const kv_block_table_config& config) : config_(config) {
  if (config.n_layers <= 0 || config.n_kv_heads <= 0)
    throw std::invalid_argument("kv_block_table: n_layers and n_kv_heads must be > 0, got " +
                                std::to_string(config.n_layers) + " and " +
                                std::to_string(config.n_kv_heads));
  if (config.block_tokens <= 0)
    throw std::invalid_argument("kv_block_table: block_tokens must be > 0, got " +
                                std::to_string(config.block_tokens));
  if (config.total_blocks < 0)
    throw std::invalid_argument("kv_block_table: total_blocks must be >= 0, got " +
                                std::to_string(config.total_blocks));
  free_list_.reserve(std::size_t(config.total_blocks));
  // Low block numbers are handed out first, so a fresh store fills from the start.
  for (std::int64_t b = config.total_blocks - 1; b >= 0; --b) free_list_.push_back(b);
}

std::int64_t kv_block_table::blocks_for(std::int64_t tokens) const {
  return (tokens + config_.block_tokens - 1) / config_.block_tokens * streams();
}

std::int64_t kv_block_table::blocks_needed(seq_id seq, std::int64_t n) const {
  const auto it = seqs_.find(seq);
  const std::int64_t have_tokens = it == seqs_.end() ? 0 : it->second.tokens;
  const std::int64_t have_blocks = it == seqs_.end() ? 0 : std::int64_t(it->second.blocks.size());
  return std::max<std::int64_t>(0, blocks_for(have_tokens + n) - have_blocks);
}

std::int64_t kv_block_table::capacity(seq_id seq) const {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) return 0;
  return std::int64_t(it->second.blocks.size()) / streams() * config_.block_tokens;
}

void kv_block_table::check_budget(seq_id seq, std::int64_t need, const std::string& what) const {
  if (need <= std::int64_t(free_list_.size())) return;
  throw kv_budget_error(seq, need, std::int64_t(free_list_.size()), config_.total_blocks,
                        "sequence " + std::to_string(seq) + ": " + what + " needs " + std::to_string(need) +
                            " blocks (" + std::to_string(streams()) + " streams x " +
                            std::to_string(config_.block_tokens) + " tokens), but only " +
                            std::to_string(free_list_.size()) + " of " + std::to_string(config_.total_blocks) +
                            " are free");
}

void kv_block_table::take(sequence_blocks& s, std::int64_t need) {
  for (std::int64_t i = 0; i < need; ++i) {
    s.blocks.push_back(free_list_.back());
    free_list_.pop_back();
  }
}

std::int64_t kv_block_table::reserve(seq_id seq, std::int64_t tokens) {
  if (tokens < 0) throw std::invalid_argument("kv_block_table: reserve of " + std::to_string(tokens) + " tokens");
  const auto it = seqs_.find(seq);
  const std::int64_t have = it == seqs_.end() ? 0 : std::int64_t(it->second.blocks.size());
  const std::int64_t need = std::max<std::int64_t>(0, blocks_for(tokens) - have);
  check_budget(seq, need, "reserving " + std::to_string(tokens) + " tokens");
  take(seqs_[seq], need);
  return need;
}

std::int64_t kv_block_table::append(seq_id seq, std::int64_t n) {
  if (n < 0) throw std::invalid_argument("kv_block_table: append of " + std::to_string(n) + " tokens");
  const std::int64_t need = blocks_needed(seq, n);
  check_budget(seq, need, "appending " + std::to_string(n) + " tokens");
  auto& s = seqs_[seq];
  take(s, need);
  const std::int64_t first = s.tokens;
  s.tokens += n;
  tokens_ += n;
  return first;
}

std::int64_t kv_block_table::row(seq_id seq, int layer, int head, std::int64_t pos) const {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end())
    throw std::out_of_range("kv_block_table: sequence " + std::to_string(seq) + " holds no rows");
  if (layer < 0 || layer >= config_.n_layers || head < 0 || head >= config_.n_kv_heads)
    throw std::out_of_range("kv_block_table: (layer " + std::to_string(layer) + ", head " +
                            std::to_string(head) + ") outside " + std::to_string(config_.n_layers) +
                            " layers x " + std::to_string(config_.n_kv_heads) + " heads");
  if (pos < 0 || pos >= it->second.tokens)
    throw std::out_of_range("kv_block_table: sequence " + std::to_string(seq) + " position " +
                            std::to_string(pos) + " outside its " + std::to_string(it->second.tokens) +
                            " stored tokens");
  const std::int64_t stream = std::int64_t(layer) * config_.n_kv_heads + head;
  const std::int64_t k = pos / config_.block_tokens;
  return it->second.blocks[std::size_t(k * streams() + stream)] * config_.block_tokens +
         pos % config_.block_tokens;
}

std::int64_t kv_block_table::length(seq_id seq) const {
  const auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.tokens;
}

std::int64_t kv_block_table::free(seq_id seq) {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) return 0;
  const auto n = std::int64_t(it->second.blocks.size());
  free_list_.insert(free_list_.end(), it->second.blocks.rbegin(), it->second.blocks.rend());
  tokens_ -= it->second.tokens;
  seqs_.erase(it);
  return n;
}

kv_table_usage kv_block_table::usage() const {
  std::int64_t filled = 0;
  for (const auto& [id, s] : seqs_) filled += blocks_for(s.tokens);
  const std::int64_t used = config_.total_blocks - std::int64_t(free_list_.size());
  return {used, config_.total_blocks, std::int64_t(seqs_.size()), tokens_, used - filled};
}

}  // namespace specpipe
