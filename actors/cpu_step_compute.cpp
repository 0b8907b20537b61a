#include "actors/cpu_step_compute.hpp"

#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include "actors/kv_rows_pack.hpp"
#include "model/forward.hpp"

namespace specpipe {
namespace {

// A cache_policy that forwards to the full cache and keeps a copy of the
// rows appended during the current step.
class capturing_cache final : public cache_policy {
 public:
  capturing_cache(std::unique_ptr<cache_policy> inner, int layers, std::int64_t kv_dim)
      : inner_(std::move(inner)), kv_dim_(kv_dim), k_(std::size_t(layers)), v_(std::size_t(layers)) {}

  void begin_step() {
    for (auto& x : k_) x.clear();
    for (auto& x : v_) x.clear();
  }
  const std::vector<float>& k(int layer) const { return k_[std::size_t(layer)]; }
  const std::vector<float>& v(int layer) const { return v_[std::size_t(layer)]; }

  std::int64_t length(int layer) const override { return inner_->length(layer); }
  void append(int layer, const float* k, const float* v, std::int64_t n) override {
    inner_->append(layer, k, v, n);
    const std::size_t count = std::size_t(n * kv_dim_);
    k_[std::size_t(layer)].insert(k_[std::size_t(layer)].end(), k, k + count);
    v_[std::size_t(layer)].insert(v_[std::size_t(layer)].end(), v, v + count);
  }
  void attend(int layer, const float* q, std::int64_t n, std::int64_t pos0, float* out) override {
    inner_->attend(layer, q, n, pos0, out);
  }
  void truncate(std::int64_t n) override { inner_->truncate(n); }
  std::size_t bytes_used() const override { return inner_->bytes_used(); }

 private:
  std::unique_ptr<cache_policy> inner_;
  std::int64_t kv_dim_;
  std::vector<std::vector<float>> k_, v_;
};

class cpu_step_compute final : public step_compute {
 public:
  cpu_step_compute(const model_config& config, const model_weights& weights, const cpu_step_options& opts)
      : config_(config), opts_(opts), fwd_(config, weights, opts.threads) {
    if (opts.max_context <= 0) throw std::invalid_argument("cpu step compute: max_context must be > 0");
  }

  compute_shape shape() const override {
    return {int(config_.num_hidden_layers), int(config_.num_key_value_heads), int(config_.head_dim),
            config_.vocab_size};
  }

  void run(const step_entry& e, step_output& out) override {
    auto it = caches_.find(e.seq);
    if (it == caches_.end()) {
      if (e.phase != seq_phase::prefill)
        throw std::runtime_error("decode step for a sequence without a cache (no prefill ran)");
      auto inner = opts_.make_cache ? opts_.make_cache(config_, opts_.max_context, &fwd_.pool())
                                    : make_full_cache(config_, opts_.max_context, &fwd_.pool());
      it = caches_.emplace(e.seq, std::make_unique<capturing_cache>(std::move(inner), int(config_.num_hidden_layers),
                                                                    config_.kv_dim()))
               .first;
    }
    capturing_cache& cache = *it->second;
    if (cache.length(0) != e.pos0)
      throw std::runtime_error("step at position " + std::to_string(e.pos0) + " but the cache holds " +
                               std::to_string(cache.length(0)) + " tokens");
    if (e.pos0 + std::int64_t(e.tokens.size()) > opts_.max_context)
      throw std::runtime_error(std::to_string(e.pos0 + std::int64_t(e.tokens.size())) +
                               " tokens exceed the cache of " + std::to_string(opts_.max_context));
    cache.begin_step();
    out.logits.resize(std::size_t(config_.vocab_size));
    fwd_.forward(e.tokens, cache, out.logits);
    out.cache_length = cache.length(0);
    out.rows = pack_rows(e, cache);
  }

  void release(seq_id seq) override { caches_.erase(seq); }
  std::int64_t sequences() const override { return std::int64_t(caches_.size()); }
  std::int64_t cache_bytes() const override {
    std::int64_t b = 0;
    for (const auto& [id, c] : caches_) b += std::int64_t(c->bytes_used());
    return b;
  }

 private:
  std::shared_ptr<const kv_rows> pack_rows(const step_entry& e, const capturing_cache& cache) const {
    std::vector<const float*> k, v;
    for (int l = 0; l < int(config_.num_hidden_layers); ++l) {
      k.push_back(cache.k(l).data());
      v.push_back(cache.v(l).data());
    }
    return pack_kv_rows(e.seq, e.pos0, std::int64_t(e.tokens.size()), int(config_.num_key_value_heads),
                        config_.head_dim, k, v);
  }

  model_config config_;
  cpu_step_options opts_;
  cpu_forward fwd_;
  std::unordered_map<seq_id, std::unique_ptr<capturing_cache>> caches_;
};

}  // namespace

std::shared_ptr<step_compute> make_cpu_step_compute(const model_config& config, const model_weights& weights,
                                                    const cpu_step_options& opts) {
  return std::make_shared<cpu_step_compute>(config, weights, opts);
}

}  // namespace specpipe
