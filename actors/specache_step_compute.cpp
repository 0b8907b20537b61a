#include "actors/specache_step_compute.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "actors/kv_rows_pack.hpp"
#include "actors/trace_event.hpp"
#include "kernels/sampling.hpp"
#include "model/forward.hpp"
#include "model/specache_topk.hpp"

namespace specpipe {
namespace {

// The cache's window onto the pipeline for the entry being run.
class pipeline_link final : public specache_link {
 public:
  pipeline_link(const model_config& c, int k)
      : layers_(int(c.num_hidden_layers)),
        heads_(c.num_key_value_heads),
        group_(int(c.num_attention_heads / c.num_key_value_heads)),
        d_(c.head_dim),
        k_(k),
        rows_(std::size_t(layers_)),
        read_(std::size_t(layers_), nullptr) {}

  void attach(speculation_link link) { link_ = std::move(link); }
  bool attached() const { return bool(link_.prefetch); }

  // The entry about to run: its tickets (one per layer) and where its
  // figures go.
  void bind(const step_entry& e, step_output& out) {
    seq_ = e.seq;
    tickets_.assign(std::size_t(layers_), nullptr);
    for (const auto& t : e.fetched) {
      if (!t || t->selections.empty()) continue;
      const int l = t->selections.front().layer;
      if (l < 0 || l >= layers_) throw std::runtime_error("fetched rows name layer " + std::to_string(l));
      tickets_[std::size_t(l)] = t.get();
    }
    std::fill(read_.begin(), read_.end(), nullptr);
    out_ = &out;
  }

  const specache_rows* rows(int layer) override {
    const fetched_rows* t = tickets_[std::size_t(layer)];
    if (!t) return nullptr;
    read_[std::size_t(layer)] = &take(*t, layer, trace_now_us());
    return read_[std::size_t(layer)];
  }

  void speculative(const specache_probs& p) override { link_.prefetch(scores_of(p)); }

  const specache_rows* fetch_now(const specache_probs& p) override {
    // The worker waits from the request on: planning and resolving are on
    // its critical path too.
    const double t0 = trace_now_us();
    const auto ticket = link_.fetch_now(scores_of(p));
    read_[std::size_t(p.layer)] = &take(*ticket, p.layer, t0);
    return read_[std::size_t(p.layer)];
  }

  void exact(const specache_probs& p) override {
    needed_.choose(p, k_);
    out_->specache.needed += needed_.total();
    if (const specache_rows* r = read_[std::size_t(p.layer)]) out_->specache.hits += needed_.hits_in(*r);
  }

 private:
  std::shared_ptr<const spec_scores> scores_of(const specache_probs& p) const {
    auto s = std::make_shared<spec_scores>();
    s->seq = seq_;
    s->layer0 = p.layer;
    s->n_layers = 1;
    s->n_kv_heads = int(p.n_kv_heads);
    s->group = int(p.n_heads / p.n_kv_heads);
    s->n_positions = p.candidates;
    s->query_position = p.position;
    s->probs.resize(std::size_t(p.n_heads * p.candidates));
    for (std::int64_t h = 0; h < p.n_heads; ++h)
      std::copy(p.probs + h * p.stride, p.probs + h * p.stride + p.candidates, s->probs.begin() + h * p.candidates);
    return s;
  }

  // Waits for a layer's gather, then lays its rows out for mixed attention.
  const specache_rows& take(const fetched_rows& t, int layer, double t0) {
    if (std::string err = t.done->wait(); !err.empty()) throw std::runtime_error(err);
    const double t1 = trace_now_us();
    out_->wait_us += t1 - t0;
    if (link_.consumed) link_.consumed(t, t0, t1);
    specache_rows& r = rows_[std::size_t(layer)];
    std::int64_t stride = 0;
    for (const auto& sel : t.selections) stride = std::max(stride, std::int64_t(sel.positions.size()));
    r.reset(heads_, stride, d_);
    const std::size_t half = std::size_t(d_) * 2;
    if (t.row_bytes != 2 * half) throw std::runtime_error("fetched rows of " + std::to_string(t.row_bytes) + " bytes");
    std::int64_t i = 0;
    for (const auto& sel : t.selections) {
      if (sel.layer != layer || sel.kv_head < 0 || sel.kv_head >= heads_)
        throw std::runtime_error("fetched rows for layer " + std::to_string(sel.layer) + " head " +
                                 std::to_string(sel.kv_head) + " where layer " + std::to_string(layer) + " was due");
      const std::int64_t h = sel.kv_head;
      for (std::size_t j = 0; j < sel.positions.size(); ++j, ++i) {
        const std::int64_t slot = h * stride + std::int64_t(j);
        r.positions[std::size_t(slot)] = sel.positions[j];
        std::memcpy(r.k.data() + slot * d_, t.row(i), half);
        std::memcpy(r.v.data() + slot * d_, t.row(i) + half, half);
      }
      r.count[std::size_t(h)] = std::int64_t(sel.positions.size());
    }
    out_->specache.rows_fetched += t.n_rows;
    out_->specache.bytes_fetched += t.n_rows * std::int64_t(t.row_bytes);
    return r;
  }

  int layers_;
  std::int64_t heads_;
  int group_;
  std::int64_t d_;
  int k_;
  speculation_link link_;
  seq_id seq_ = 0;
  std::vector<const fetched_rows*> tickets_;
  std::vector<specache_rows> rows_;
  std::vector<const specache_rows*> read_;  // this step's rows per layer
  step_output* out_ = nullptr;
  specache_topk needed_;
};

struct seq_state {
  std::unique_ptr<specache_cache> cache;
  bool have_spec = false;
  std::int32_t spec_token = 0;
  std::int64_t guess_pos = -1;  // where the last speculative token ran
  std::int32_t guess_token = 0;
};

class specache_step_compute final : public step_compute {
 public:
  specache_step_compute(const model_config& config, const model_weights& weights, const specache_step_options& opts)
      : config_(config), opts_(opts), fwd_(config, weights, opts.threads), link_(config, opts.config.topk) {
    if (opts.max_context <= 0) throw std::invalid_argument("specache step compute: max_context must be > 0");
    if (opts.config.topk < 1)
      throw std::invalid_argument("specache: --topk must be >= 1, got " + std::to_string(opts.config.topk));
    logits2_.resize(std::size_t(2 * config.vocab_size));
  }

  compute_shape shape() const override {
    return {int(config_.num_hidden_layers), int(config_.num_key_value_heads), int(config_.head_dim),
            config_.vocab_size, true};
  }

  void attach(speculation_link link) override { link_.attach(std::move(link)); }

  void run(const step_entry& e, step_output& out) override {
    if (!link_.attached()) throw std::logic_error("specache: the worker gave no way to the planner");
    auto it = states_.find(e.seq);
    if (it == states_.end()) {
      if (e.phase != seq_phase::prefill)
        throw std::runtime_error("decode step for a sequence without a cache (no prefill ran)");
      seq_state s;
      s.cache = std::make_unique<specache_cache>(config_, opts_.max_context, opts_.config.cache, &fwd_.pool());
      s.cache->set_link(&link_);
      it = states_.emplace(e.seq, std::move(s)).first;
    }
    seq_state& s = it->second;
    specache_cache& cache = *s.cache;
    check_step_entry(e, cache.length(0), opts_.max_context);
    link_.bind(e, out);
    const auto vocab = std::size_t(config_.vocab_size);
    out.logits.resize(vocab);
    if (e.phase == seq_phase::prefill) {
      cache.begin(specache_step::prefill);
      fwd_.forward(e.tokens, cache, out.logits);
    } else if (opts_.config.prefetch == specache_prefetch::output) {
      ++out.specache.steps;
      cache.begin(specache_step::output);
      fwd_.forward(e.tokens, cache, out.logits);
    } else {
      if (!s.have_spec) throw std::logic_error("specache: a decode step before the pre-decoding");
      ++out.specache.steps;
      const std::int32_t token = e.tokens.at(0);
      if (s.guess_pos == e.pos0) {
        ++out.specache.guesses;
        out.specache.guess_hits += s.guess_token == token;
      }
      const std::int32_t rows[2] = {token, s.spec_token};
      cache.begin(specache_step::speculative);
      fwd_.forward(rows, cache, logits2_, true);
      std::copy(logits2_.begin(), logits2_.begin() + std::ptrdiff_t(vocab), out.logits.begin());
      s.guess_pos = e.pos0 + 1;
      s.guess_token = s.spec_token;
      s.spec_token = std::int32_t(kernels::cpu::argmax(logits2_.data() + vocab, std::int64_t(vocab)));
      out.plan_position = e.pos0 + 1;
      out.plan_layers = int(config_.num_hidden_layers);
    }
    cache.commit();
    out.cache_length = cache.length(0);
    out.rows = fresh_rows(e.seq, e.pos0, cache);
  }

  void picked(const step_entry& e, std::int32_t token, step_output& out) override {
    if (e.phase != seq_phase::prefill || opts_.config.prefetch != specache_prefetch::speculative) return;
    // Pre-decoding: the first token alone over the low-bit cache; its
    // attention picks the first top-k set, its output is the first
    // speculative token. Its row is not kept: it runs again as the real
    // token of the next step.
    seq_state& s = states_.at(e.seq);
    specache_cache& cache = *s.cache;
    step_entry pre;
    pre.seq = e.seq;
    link_.bind(pre, out);
    const auto vocab = std::size_t(config_.vocab_size);
    cache.begin(specache_step::predecode);
    fwd_.forward(std::span(&token, 1), cache, std::span(logits2_).first(vocab));
    cache.commit();
    s.spec_token = std::int32_t(kernels::cpu::argmax(logits2_.data(), std::int64_t(vocab)));
    s.have_spec = true;
    out.plan_position = cache.length(0);
    out.plan_layers = int(config_.num_hidden_layers);
  }

  void release(seq_id seq) override { states_.erase(seq); }
  std::int64_t sequences() const override { return std::int64_t(states_.size()); }
  std::int64_t cache_bytes() const override {
    std::int64_t b = 0;
    for (const auto& [id, s] : states_) b += std::int64_t(s.cache->bytes_used());
    return b;
  }

 private:
  std::shared_ptr<const kv_rows> fresh_rows(seq_id seq, std::int64_t pos0, const specache_cache& cache) const {
    std::vector<const float*> k, v;
    for (int l = 0; l < int(config_.num_hidden_layers); ++l) {
      k.push_back(cache.fresh_keys(l));
      v.push_back(cache.fresh_values(l));
    }
    return pack_kv_rows(seq, pos0, cache.fresh_kept(), int(config_.num_key_value_heads), config_.head_dim, k, v);
  }

  model_config config_;
  specache_step_options opts_;
  cpu_forward fwd_;
  pipeline_link link_;
  std::unordered_map<seq_id, seq_state> states_;
  std::vector<float> logits2_;
};

}  // namespace

std::shared_ptr<step_compute> make_specache_step_compute(const model_config& config, const model_weights& weights,
                                                         const specache_step_options& opts) {
  return std::make_shared<specache_step_compute>(config, weights, opts);
}

}  // namespace specpipe
