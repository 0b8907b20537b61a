#pragma once
// Passkey-retrieval documents in the format of tools/passkey.py (its
// docstring is the specification): a number hidden in book text, asked for
// at the end. Token level, every piece encoded separately without special
// tokens and the id lists concatenated:
//
//   prompt = [BOS] + H[0:p] + enc(NEEDLE) + H[p:m] + enc(QUESTION)
//   answer = enc(ANSWER)
//
// m makes len(prompt) exactly the requested length, p = round(depth * m)
// (Python's round: halves go to the even neighbour), and an evaluation
// sample of length L has a prompt of L - len(answer) - 1 tokens.
//
// Sampling differs from the Python tool by design (the format is the
// contract, not numpy's generator): sample i of cell (length, depth index j)
// draws from std::mt19937_64 seeded with std::seed_seq{seed, length, j, i}
// (both fully specified by the C++ standard, so every platform gets the same
// documents), in the order book, window start, key, each with an unbiased
// bounded draw (rejection sampling, not std::uniform_int_distribution, whose
// algorithm is left to the library).
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer.hpp"

namespace specpipe {

inline constexpr std::string_view passkey_needle_format =
    "\nThe pass key is {key}. Remember it. {key} is the pass key.\n";
inline constexpr std::string_view passkey_question = "\nWhat is the pass key? The pass key is";
inline constexpr std::string_view passkey_answer_format = " {key}";

// Replaces every "{key}" in `format` with `key`.
std::string passkey_text(std::string_view format, std::string_view key);

// One book of the haystack: its whole text encoded without special tokens.
struct haystack_book {
  std::string name;  // file name, for error messages
  std::vector<std::int32_t> tokens;
};

// Uniform integer in [0, n), n > 0, unbiased (rejection of the top partial range).
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n);

// A `digits`-digit decimal key with a non-zero first digit.
std::string passkey_random_key(std::mt19937_64& rng, int digits);

// p = round(depth * m) with round-half-to-even, as numpy/Python's round().
std::int64_t passkey_needle_offset(double depth, std::int64_t m);

struct passkey_document {
  std::string key;
  double depth = 0;
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> answer;
  std::int64_t needle_at = 0;  // index of the needle's first token in prompt
  std::int64_t needle_tokens = 0;
};

class passkey_builder {
 public:
  explicit passkey_builder(const tokenizer& tok);

  // prompt of exactly prompt_length tokens, the first m tokens of `hay` as
  // haystack. Throws std::invalid_argument when prompt_length is shorter than
  // the fixed parts or hay holds fewer than m tokens.
  passkey_document assemble(std::span<const std::int32_t> hay, const std::string& key, double depth,
                            std::int64_t prompt_length) const;

  // Evaluation sample `index` of cell (length, depth_index): a window of
  // `length` tokens from a book long enough (uniform among them), a 5-digit
  // key, a prompt of length - len(answer) - 1 tokens. Throws
  // std::invalid_argument when no book holds `length` tokens.
  passkey_document eval_sample(const std::vector<haystack_book>& books, std::int64_t length, int depth_index,
                               double depth, int index, std::uint64_t seed, int digits = 5) const;

  std::vector<std::int32_t> encode(std::string_view text) const;
  const std::vector<std::int32_t>& question() const { return question_; }
  const std::vector<std::int32_t>& bos() const { return bos_; }

 private:
  const tokenizer& tok_;
  std::vector<std::int32_t> bos_;
  std::vector<std::int32_t> question_;
};

// The scoring rule of tools/passkey.py: the text, after leading whitespace,
// starts with a run of digits that equals the key (so " 48213." passes,
// " 482131" and " the 48213" do not). ASCII whitespace and digits.
bool passkey_correct(std::string_view generated_text, std::string_view key);

}  // namespace specpipe
