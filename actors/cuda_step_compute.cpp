#include "actors/cuda_step_compute.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/trace_event.hpp"
#include "model/cuda_forward.hpp"

namespace specpipe {
namespace {

cuda_forward_options forward_options(const cuda_step_options& o) {
  if (o.max_context <= 0) throw std::invalid_argument("cuda step compute: max_context must be > 0");
  if (o.max_sequences <= 0) throw std::invalid_argument("cuda step compute: max_sequences must be > 0");
  if (o.kv.speculative())
    throw std::invalid_argument(
        "cuda step compute: --kv specache needs the host store and the fetch (actors/cuda_specache_step_compute.hpp)");
  cuda_forward_options f;
  f.max_batch = o.max_sequences;
  f.max_context = o.max_context;
  f.kv = o.kv;
  return f;
}

class cuda_step_compute final : public step_compute {
 public:
  cuda_step_compute(const model_config& config, const model_weights& weights, const cuda_step_options& opts)
      : config_(config),
        opts_(opts),
        fwd_opts_(forward_options(opts)),
        model_(config, weights, opts.device),
        fwd_(model_, fwd_opts_) {
    for (int s = opts.max_sequences - 1; s >= 0; --s) free_.push_back(s);
  }

  compute_shape shape() const override {
    return {int(config_.num_hidden_layers), int(config_.num_key_value_heads), int(config_.head_dim),
            config_.vocab_size};
  }
  const char* track_prefix() const override { return "cuda "; }

  void run(const step_entry& e, step_output& out) override {
    run_batch({&e, 1}, {&out, 1});
    if (!out.error.empty()) throw std::runtime_error(out.error);
  }

  // Prefills (and multi-token entries) run one by one, each as its own
  // forward; the single-token decode entries of the step then run as one
  // batched forward whose time they share.
  void run_batch(std::span<const step_entry> entries, std::span<step_output> outs) override {
    fwd_.bind_thread();
    batch_slots_.clear();
    batch_tokens_.clear();
    batch_index_.clear();
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const step_entry& e = entries[i];
      step_output& out = outs[i];
      if (!out.error.empty()) continue;
      try {
        const int slot = slot_for(e);
        check_step_entry(e, fwd_.length(slot), opts_.max_context);
        if (e.tokens.empty()) throw std::runtime_error("a step without tokens");
        if (e.phase == seq_phase::prefill || e.tokens.size() > 1) {
          out.compute_start_us = trace_now_us();
          out.logits.resize(std::size_t(config_.vocab_size));
          fwd_.prefill(slot, e.tokens, out.logits);
          out.compute_end_us = trace_now_us();
          out.compute_us = out.compute_end_us - out.compute_start_us;
          out.cache_length = fwd_.length(slot);
        } else {
          batch_slots_.push_back(slot);
          batch_tokens_.push_back(e.tokens.front());
          batch_index_.push_back(i);
        }
      } catch (const std::exception& ex) {
        out.error = ex.what();
      }
    }
    if (batch_slots_.empty()) return;
    const std::size_t n = batch_slots_.size(), vocab = std::size_t(config_.vocab_size);
    const double t0 = trace_now_us();
    std::string error;
    try {
      logits_.resize(n * vocab);
      fwd_.decode(batch_slots_, batch_tokens_, logits_);
    } catch (const std::exception& ex) {
      error = ex.what();  // one forward: every entry of it failed
    }
    const double t1 = trace_now_us();
    for (std::size_t k = 0; k < n; ++k) {
      step_output& out = outs[batch_index_[k]];
      out.compute_start_us = t0;
      out.compute_end_us = t1;
      out.compute_us = (t1 - t0) / double(n);
      if (!error.empty()) {
        out.error = "batched decode of " + std::to_string(n) + " sequences: " + error;
        continue;
      }
      out.logits.assign(logits_.begin() + std::ptrdiff_t(k * vocab), logits_.begin() + std::ptrdiff_t((k + 1) * vocab));
      out.cache_length = fwd_.length(batch_slots_[k]);
    }
  }

  void release(seq_id seq) override {
    const auto it = slots_.find(seq);
    if (it == slots_.end()) return;
    fwd_.bind_thread();
    fwd_.truncate(it->second, 0);
    free_.push_back(it->second);
    slots_.erase(it);
  }
  std::int64_t sequences() const override { return std::int64_t(slots_.size()); }
  // Device bytes the sequences' tokens occupy: packed tokens at the mode's
  // bytes per token, window (or full-cache) tokens as bf16 rows.
  std::int64_t cache_bytes() const override {
    const double packed = cuda_forward::kv_bytes_per_token(config_, opts_.kv);
    const double rows = double(cuda_forward::kv_bytes_per_token(config_));
    double b = 0;
    for (const auto& [seq, slot] : slots_) {
      const std::int64_t q = fwd_.quantized(slot), len = fwd_.length(slot);
      b += double(q) * packed + double(len - q) * rows;
    }
    return std::int64_t(b);
  }

 private:
  int slot_for(const step_entry& e) {
    const auto it = slots_.find(e.seq);
    if (it != slots_.end()) return it->second;
    if (e.phase != seq_phase::prefill)
      throw std::runtime_error("decode step for a sequence without a cache (no prefill ran)");
    if (free_.empty())
      throw std::runtime_error("all " + std::to_string(opts_.max_sequences) +
                               " sequence slots of this GPU worker are in use");
    const int slot = free_.back();
    free_.pop_back();
    fwd_.truncate(slot, 0);
    slots_.emplace(e.seq, slot);
    return slot;
  }

  model_config config_;
  cuda_step_options opts_;
  cuda_forward_options fwd_opts_;
  cuda_model model_;
  cuda_forward fwd_;
  std::unordered_map<seq_id, int> slots_;
  std::vector<int> free_;
  // Per-step scratch, kept so that steps do not allocate.
  std::vector<int> batch_slots_;
  std::vector<std::int32_t> batch_tokens_;
  std::vector<std::size_t> batch_index_;
  std::vector<float> logits_;
};

}  // namespace

std::shared_ptr<step_compute> make_cuda_step_compute(const model_config& config, const model_weights& weights,
                                                     const cuda_step_options& opts) {
  return std::make_shared<cuda_step_compute>(config, weights, opts);
}

std::size_t cuda_step_device_bytes(const model_config& config, const cuda_step_options& opts) {
  return cuda_model::weight_bytes(config) + cuda_forward::device_bytes(config, forward_options(opts));
}

}  // namespace specpipe
