#include "model/specache_session.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/sampling.hpp"
#include "memory/dtype.hpp"
#include "model/specache_topk.hpp"

namespace specpipe {

// The host half of the method, inline: 16-bit K|V rows per layer, the top-k
// of each probability row, and the copy of the chosen rows.
class specache_session::host_link final : public specache_link {
 public:
  host_link(const model_config& c, int k)
      : layers_(int(c.num_hidden_layers)),
        heads_(c.num_key_value_heads),
        d_(c.head_dim),
        k_(k),
        store_(std::size_t(layers_)),
        current_(std::size_t(layers_)),
        next_(std::size_t(layers_)),
        now_(std::size_t(layers_)),
        have_current_(false) {}

  // Appends one token's rows of every layer (f32, [n_kv_heads, head_dim]).
  void append(int layer, const float* k, const float* v) {
    auto& s = store_[std::size_t(layer)];
    for (std::int64_t h = 0; h < heads_; ++h) {
      for (std::int64_t i = 0; i < d_; ++i) s.push_back(f32_to_f16(k[h * d_ + i]));
      for (std::int64_t i = 0; i < d_; ++i) s.push_back(f32_to_f16(v[h * d_ + i]));
    }
  }
  std::size_t bytes() const {
    std::size_t b = 0;
    for (const auto& s : store_) b += s.size() * sizeof(std::uint16_t);
    return b;
  }

  // The rows planned during a step become the rows the next step reads.
  void advance() {
    std::swap(current_, next_);
    have_current_ = true;
  }

  const specache_rows* rows(int layer) override { return have_current_ ? &current_[std::size_t(layer)] : nullptr; }
  void speculative(const specache_probs& p) override { fill(p, next_[std::size_t(p.layer)]); }
  const specache_rows* fetch_now(const specache_probs& p) override {
    fill(p, now_[std::size_t(p.layer)]);
    return &now_[std::size_t(p.layer)];
  }
  void exact(const specache_probs& p) override {
    needed_.choose(p, k_);
    const auto& read = output_mode_ ? now_[std::size_t(p.layer)] : current_[std::size_t(p.layer)];
    stats.needed += needed_.total();
    stats.hits += needed_.hits_in(read);
  }

  void set_output_mode(bool on) { output_mode_ = on; }
  specache_stats stats;

 private:
  void fill(const specache_probs& p, specache_rows& out) {
    chosen_.choose(p, k_);
    out.reset(heads_, k_, d_);
    const auto& s = store_[std::size_t(p.layer)];
    const std::int64_t row = 2 * d_;
    for (std::int64_t h = 0; h < heads_; ++h) {
      const std::int64_t n = chosen_.count(h);
      out.count[std::size_t(h)] = n;
      for (std::int64_t r = 0; r < n; ++r) {
        const std::int64_t pos = chosen_.positions(h)[r];
        if ((pos * heads_ + h + 1) * row > std::int64_t(s.size()))
          throw std::logic_error("specache: top-k chose position " + std::to_string(pos) +
                                 ", past the host store's rows");
        out.positions[std::size_t(h * k_ + r)] = pos;
        const std::uint16_t* src = s.data() + (pos * heads_ + h) * row;
        std::memcpy(out.k.data() + (h * k_ + r) * d_, src, std::size_t(d_) * 2);
        std::memcpy(out.v.data() + (h * k_ + r) * d_, src + d_, std::size_t(d_) * 2);
      }
    }
    stats.rows_fetched += chosen_.total();
    stats.bytes_fetched += chosen_.total() * row * 2;
  }

  int layers_;
  std::int64_t heads_, d_;
  int k_;
  std::vector<std::vector<std::uint16_t>> store_;  // per layer [pos][head][K d | V d] f16
  std::vector<specache_rows> current_, next_, now_;
  bool have_current_;
  bool output_mode_ = false;
  specache_topk chosen_, needed_;
};

specache_session::specache_session(cpu_forward& fwd, const specache_config& config, std::int64_t max_tokens)
    : fwd_(fwd), config_(config) {
  if (config.topk < 1) throw std::invalid_argument("specache: --topk must be >= 1, got " + std::to_string(config.topk));
  cache_ = std::make_unique<specache_cache>(fwd.config(), max_tokens, config.cache, &fwd.pool());
  link_ = std::make_unique<host_link>(fwd.config(), config.topk);
  link_->set_output_mode(config.prefetch == specache_prefetch::output);
  cache_->set_link(link_.get());
  logits2_.resize(std::size_t(2 * fwd.config().vocab_size));
}

specache_session::~specache_session() = default;

std::int64_t specache_session::length() const { return cache_->length(0); }
const specache_stats& specache_session::stats() const { return link_->stats; }
std::size_t specache_session::host_bytes() const { return link_->bytes(); }

void specache_session::store_fresh() {
  const std::int64_t kv_dim = fwd_.config().kv_dim();
  for (int l = 0; l < int(fwd_.config().num_hidden_layers); ++l)
    for (std::int64_t t = 0; t < cache_->fresh_kept(); ++t)
      link_->append(l, cache_->fresh_keys(l) + t * kv_dim, cache_->fresh_values(l) + t * kv_dim);
}

void specache_session::prefill(std::span<const std::int32_t> tokens, std::span<float> logits) {
  cache_->begin(specache_step::prefill);
  fwd_.forward(tokens, *cache_, logits);
  cache_->commit();
  store_fresh();
}

void specache_session::predecode(std::int32_t token) {
  cache_->begin(specache_step::predecode);
  const auto vocab = std::size_t(fwd_.config().vocab_size);
  fwd_.forward(std::span(&token, 1), *cache_, std::span(logits2_).first(vocab));
  cache_->commit();
  spec_token_ = std::int32_t(kernels::cpu::argmax(logits2_.data(), std::int64_t(vocab)));
  have_spec_ = true;
}

void specache_session::step(std::int32_t token, std::span<float> logits) {
  const auto vocab = std::size_t(fwd_.config().vocab_size);
  const std::int64_t pos = length();
  ++link_->stats.steps;
  if (config_.prefetch == specache_prefetch::output) {
    cache_->begin(specache_step::output);
    fwd_.forward(std::span(&token, 1), *cache_, logits);
    cache_->commit();
    store_fresh();
    return;
  }
  if (!have_spec_) predecode(token);
  if (guess_pos_ == pos) {
    ++link_->stats.guesses;
    if (guess_token_ == token) ++link_->stats.guess_hits;
  }
  link_->advance();
  const std::int32_t rows[2] = {token, spec_token_};
  cache_->begin(specache_step::speculative);
  fwd_.forward(rows, *cache_, logits2_, true);
  cache_->commit();
  store_fresh();
  std::copy(logits2_.begin(), logits2_.begin() + std::ptrdiff_t(vocab), logits.begin());
  guess_pos_ = pos + 1;
  guess_token_ = spec_token_;
  spec_token_ = std::int32_t(kernels::cpu::argmax(logits2_.data() + vocab, std::int64_t(vocab)));
}

}  // namespace specpipe
