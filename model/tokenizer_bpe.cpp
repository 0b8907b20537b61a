#include "model/tokenizer_bpe.hpp"

#include <algorithm>
#include <cstdio>
#include <queue>

#include <boost/json/object.hpp>

#include "model/tokenizer_utf8.hpp"

namespace specpipe::tokenization {

namespace json = boost::json;

namespace {

// Token ids index dense tables, so a corrupt id must not become a huge allocation.
constexpr std::int64_t max_token_id = (1 << 24) - 1;

std::int32_t lookup_merge_part(const token_map& vocab, std::string_view part, const json_reader& reader,
                               const std::string& field) {
  const auto it = vocab.find(part);
  if (it == vocab.end()) reader.fail(field, "merge refers to \"" + std::string(part) + "\", which is not in model.vocab");
  return it->second;
}

}  // namespace

bpe_model::bpe_model(bpe_model&& other) noexcept
    : vocab_(std::move(other.vocab_)), merges_(std::move(other.merges_)), unk_(other.unk_),
      byte_fallback_(other.byte_fallback_), fuse_unk_(other.fuse_unk_), ignore_merges_(other.ignore_merges_),
      id_end_(other.id_end_), cache_(std::move(other.cache_)) {
  std::copy(std::begin(other.byte_ids_), std::end(other.byte_ids_), byte_ids_);
}

bpe_model& bpe_model::operator=(bpe_model&& other) noexcept {
  if (this != &other) {
    vocab_ = std::move(other.vocab_);
    merges_ = std::move(other.merges_);
    unk_ = other.unk_;
    std::copy(std::begin(other.byte_ids_), std::end(other.byte_ids_), byte_ids_);
    byte_fallback_ = other.byte_fallback_;
    fuse_unk_ = other.fuse_unk_;
    ignore_merges_ = other.ignore_merges_;
    id_end_ = other.id_end_;
    const std::lock_guard lock(cache_mutex_);
    cache_ = std::move(other.cache_);
  }
  return *this;
}

bpe_model bpe_model::from_json(const json::object& model, const json_reader& reader, const std::string& field) {
  bpe_model m;
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json::value* v = json_reader::member(model, key)) {
      if (!reader.as_string(*v, json_path(field, key)).empty()) {
        reader.fail(json_path(field, key), "not supported by this BPE (expected null or \"\")");
      }
    }
  }
  if (const json::value* v = json_reader::member(model, "dropout")) {
    if (!v->is_number() || v->to_number<double>() != 0.0) {
      reader.fail(json_path(field, "dropout"), "BPE dropout makes encoding random; expected null or 0");
    }
  }
  m.byte_fallback_ = reader.bool_or(model, "byte_fallback", field, false);
  m.fuse_unk_ = reader.bool_or(model, "fuse_unk", field, false);
  m.ignore_merges_ = reader.bool_or(model, "ignore_merges", field, false);

  const std::string vfield = json_path(field, "vocab");
  const json::object& vocab = reader.as_object(reader.required(model, "vocab", field), vfield);
  m.vocab_.reserve(vocab.size());
  for (const auto& kv : vocab) {
    const std::string efield = vfield + "[\"" + std::string(kv.key()) + "\"]";
    const std::int64_t id = reader.as_int(kv.value(), efield);
    if (id < 0 || id > max_token_id) {
      reader.fail(efield, "token id " + std::to_string(id) + " outside [0, " + std::to_string(max_token_id) + "]");
    }
    m.vocab_.emplace(std::string(kv.key()), static_cast<std::int32_t>(id));
    m.id_end_ = std::max(m.id_end_, static_cast<std::int32_t>(id + 1));
  }

  const std::string mfield = json_path(field, "merges");
  const json::array& merges = reader.as_array(reader.required(model, "merges", field), mfield);
  m.merges_.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const std::string efield = json_path(mfield, i);
    std::string_view left, right;
    // Two formats exist: "a b" strings (tokenizers < 0.20) and [a, b] pairs.
    if (merges[i].is_string()) {
      const std::string_view s = merges[i].get_string();
      const std::size_t sp = s.find(' ');
      if (sp == std::string_view::npos || s.find(' ', sp + 1) != std::string_view::npos) {
        reader.fail(efield, "expected \"left right\" with exactly one space, found \"" + std::string(s) + "\"");
      }
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (merges[i].is_array() && merges[i].get_array().size() == 2) {
      left = reader.as_string(merges[i].get_array()[0], json_path(efield, 0));
      right = reader.as_string(merges[i].get_array()[1], json_path(efield, 1));
    } else {
      reader.fail(efield, "expected a \"left right\" string or a [left, right] pair, found " +
                              json_reader::type_name(merges[i]));
    }
    const std::int32_t a = lookup_merge_part(m.vocab_, left, reader, efield);
    const std::int32_t b = lookup_merge_part(m.vocab_, right, reader, efield);
    const std::int32_t ab = lookup_merge_part(m.vocab_, std::string(left) + std::string(right), reader, efield);
    // A repeated pair keeps its first (best) rank, as a rank table built by
    // insertion in order would.
    m.merges_.emplace(pair_key(a, b), merge{static_cast<std::int32_t>(i), ab});
  }

  if (const json::value* unk = json_reader::member(model, "unk_token")) {
    const std::string ufield = json_path(field, "unk_token");
    const std::string_view name = reader.as_string(*unk, ufield);
    const auto it = m.vocab_.find(name);
    if (it == m.vocab_.end()) reader.fail(ufield, quoted(name) + " is not in model.vocab");
    m.unk_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const auto it = m.vocab_.find(std::string_view(name));
    m.byte_ids_[b] = it == m.vocab_.end() ? -1 : it->second;
  }
  return m;
}

std::optional<std::int32_t> bpe_model::id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void bpe_model::initial_symbols(std::string_view word, std::vector<symbol>& symbols) const {
  // One symbol per character; characters outside the vocabulary become their
  // <0xNN> byte tokens (byte_fallback) or the unknown token, consecutive
  // unknowns fused into one when fuse_unk. Mirrors tokenizers' bpe/model.rs
  // merge_word, including that a pending unknown is only flushed by the next
  // in-vocabulary character.
  std::int32_t pending_unk = -1;
  auto push = [&](std::int32_t id) {
    symbols.push_back({id, static_cast<std::int32_t>(symbols.size()) - 1, static_cast<std::int32_t>(symbols.size()) + 1, true});
  };
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t n = utf8_unit_length(word, i);
    const std::string_view ch = word.substr(i, n);
    i += n;
    if (const auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending_unk >= 0) push(pending_unk);
      pending_unk = -1;
      push(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char c : ch) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (const char c : ch) push(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_) {
      if (pending_unk >= 0 && !fuse_unk_) push(pending_unk);
      pending_unk = *unk_;
    }
    // Without an unknown token the character has no id and is dropped, as
    // the reference does.
  }
  if (pending_unk >= 0) push(pending_unk);
  if (!symbols.empty()) symbols.back().next = -1;
}

void bpe_model::merge_all(std::vector<symbol>& symbols) const {
  struct candidate {
    std::int32_t rank;
    std::int32_t pos;
    std::int32_t id;
    bool operator>(const candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<candidate, std::vector<candidate>, std::greater<>> queue;
  auto consider = [&](std::int32_t pos) {
    if (pos < 0) return;
    const std::int32_t next = symbols[pos].next;
    if (next < 0) return;
    const auto it = merges_.find(pair_key(symbols[pos].id, symbols[next].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.id});
  };
  for (std::int32_t i = 0; i + 1 < static_cast<std::int32_t>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const candidate top = queue.top();
    queue.pop();
    symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    // Stale entry: one side was merged since it was queued.
    const auto it = merges_.find(pair_key(left.id, symbols[left.next].id));
    if (it == merges_.end() || it->second.id != top.id) continue;
    symbol& right = symbols[left.next];
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    consider(left.prev);
    consider(top.pos);
  }
}

void bpe_model::encode(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    // Llama-3: a word that is itself a token is emitted whole, even where the
    // merges would have split it differently.
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= cache_word_bytes;
  if (cacheable) {
    const std::lock_guard lock(cache_mutex_);
    if (const auto it = cache_.find(word); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<symbol> symbols;
  symbols.reserve(word.size());
  initial_symbols(word, symbols);
  merge_all(symbols);
  const std::size_t first = out.size();
  for (const symbol& s : symbols) {
    if (s.alive) out.push_back(s.id);
  }
  if (cacheable) {
    std::vector<std::int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
    const std::lock_guard lock(cache_mutex_);
    // A full cache is dropped rather than evicted piecemeal: cheap, and the
    // frequent words come straight back.
    if (cache_.size() >= cache_capacity) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

}  // namespace specpipe::tokenization
