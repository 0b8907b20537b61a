#include "actors/cpu_step_compute.hpp"

#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include "actors/kv_capture.hpp"
#include "model/forward.hpp"

namespace specpipe {
namespace {

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
    check_step_entry(e, cache.length(0), opts_.max_context);
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
    return pack_kv_rows(e.seq, cache, int(config_.num_hidden_layers), int(config_.num_key_value_heads),
                        config_.head_dim);
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
