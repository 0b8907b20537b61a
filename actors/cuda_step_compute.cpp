#include "actors/cuda_step_compute.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/cuda_slot_table.hpp"
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
        fwd_(model_, fwd_opts_),
        slots_(opts.max_sequences) {}

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
    fwd_.bind_thread();
    if (const int slot = slots_.release(seq); slot >= 0) fwd_.truncate(slot, 0);
  }
  std::int64_t sequences() const override { return slots_.size(); }
  std::int64_t cache_bytes() const override { return slots_.cache_bytes(fwd_, config_, opts_.kv); }

 private:
  // The sequence's slot; a new sequence (its first prefill) gets a free,
  // emptied one. Later prefill chunks continue in the slot they have.
  int slot_for(const step_entry& e) {
    if (const auto* found = slots_.find(e.seq)) return found->slot;
    if (e.phase != seq_phase::prefill) return slots_.of(e.seq).slot;  // throws: no prefill ran
    const int slot = slots_.start(e.seq).slot;
    fwd_.truncate(slot, 0);
    return slot;
  }

  model_config config_;
  cuda_step_options opts_;
  cuda_forward_options fwd_opts_;
  cuda_model model_;
  cuda_forward fwd_;
  struct no_state {};
  cuda_slot_table<no_state> slots_;
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
