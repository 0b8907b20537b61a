#pragma once
// The BPE model of a tokenizer.json: vocabulary, merges by rank, unknown
// token and sentencepiece byte fallback, Llama-3's ignore_merges. Words are
// merged with a min-heap over adjacent pairs (lowest rank first, leftmost
// on ties, as tokenizers' word.rs does), O(n log n) per word, and results
// for short words are cached since natural text repeats them constantly.
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/json/value.hpp>

#include "model/tokenizer_json.hpp"

namespace specpipe::tokenization {

struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using token_map = std::unordered_map<std::string, std::int32_t, string_hash, std::equal_to<>>;

class bpe_model {
 public:
  // `model` is the "model" object of tokenizer.json (type BPE).
  static bpe_model from_json(const boost::json::object& model, const json_reader& reader,
                             const std::string& field);

  bpe_model(bpe_model&& other) noexcept;
  bpe_model& operator=(bpe_model&& other) noexcept;

  // Appends the ids of one pre-tokenized word.
  void encode(std::string_view word, std::vector<std::int32_t>& out) const;

  std::optional<std::int32_t> id(std::string_view token) const;
  const token_map& vocab() const { return vocab_; }
  // Highest id in the vocabulary + 1.
  std::int32_t id_end() const { return id_end_; }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  bpe_model() = default;
  struct merge {
    std::int32_t rank;
    std::int32_t id;
  };
  static std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  struct symbol {
    std::int32_t id;
    std::int32_t prev;
    std::int32_t next;
    bool alive;
  };
  void initial_symbols(std::string_view word, std::vector<symbol>& symbols) const;
  void merge_all(std::vector<symbol>& symbols) const;

  token_map vocab_;
  std::unordered_map<std::uint64_t, merge> merges_;
  std::optional<std::int32_t> unk_;
  std::int32_t byte_ids_[256];  // <0xNN> tokens, -1 where absent
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::int32_t id_end_ = 0;

  static constexpr std::size_t cache_word_bytes = 128;
  static constexpr std::size_t cache_capacity = 1 << 16;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>, string_hash, std::equal_to<>> cache_;
};

}  // namespace specpipe::tokenization
