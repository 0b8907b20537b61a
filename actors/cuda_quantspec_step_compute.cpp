#include "actors/cuda_quantspec_step_compute.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/cuda_slot_table.hpp"
#include "actors/quantspec_step_compute.hpp"
#include "model/cuda_forward.hpp"
#include "model/cuda_quantspec.hpp"

namespace specpipe {
namespace {

// The most drafts a GPU round takes (the forward's verify width is sized by it).
constexpr int gpu_max_gamma = 15;

int most_drafts(const gamma_options& g) { return g.adaptive ? std::min(g.max_gamma, gpu_max_gamma) : g.gamma; }

cuda_forward_options forward_options(const cuda_quantspec_step_options& o) {
  if (o.max_context <= 0) throw std::invalid_argument("cuda quantspec step compute: max_context must be > 0");
  if (o.max_sequences <= 0) throw std::invalid_argument("cuda quantspec step compute: max_sequences must be > 0");
  if (o.kv_group != 32 && o.kv_group != 64 && o.kv_group != 128)
    throw std::invalid_argument("--group: the GPU's hierarchical cache uses groups of 32, 64 or 128 tokens, got " +
                                std::to_string(o.kv_group));
  if (!o.gamma.adaptive && o.gamma.gamma > gpu_max_gamma)
    throw std::invalid_argument("--gamma " + std::to_string(o.gamma.gamma) + ": a GPU round verifies at most " +
                                std::to_string(gpu_max_gamma) + " drafts");
  cuda_forward_options f;
  f.max_batch = o.max_sequences;
  f.max_context = o.max_context;
  f.kv = parse_kv_mode("hier", 8, o.kv_group, 0);
  const int most = most_drafts(o.gamma);
  f.kv_max_append = std::max<std::int64_t>(16, most + 1);
  f.max_step_tokens = most + 1;
  return f;
}

// A sequence's state beside its slot: the rounds' driver (sampler, gamma
// controller).
struct gpu_sequence {
  std::unique_ptr<cuda_quantspec> qs;
};

class cuda_quantspec_step_compute final : public step_compute {
 public:
  cuda_quantspec_step_compute(const model_config& config, const model_weights& weights,
                              const cuda_quantspec_step_options& opts)
      : config_(config), opts_(opts), fwd_opts_(forward_options(opts)), model_(make_model(config, weights, opts)),
        fwd_(*model_, fwd_opts_),
        table_(opts.max_sequences) {
    gamma_controller check(gamma_of(opts.gamma));  // bad gamma options fail here, not at the first request
  }

  compute_shape shape() const override {
    compute_shape s{int(config_.num_hidden_layers), int(config_.num_key_value_heads), int(config_.head_dim),
                    config_.vocab_size};
    s.multi_token = true;
    return s;
  }
  const char* track_prefix() const override { return "cuda "; }

  void run(const step_entry& e, step_output& out) override {
    fwd_.bind_thread();
    if (e.tokens.empty()) throw std::runtime_error("a step without tokens");
    if (e.phase == seq_phase::prefill) {
      const auto& [slot, s] = start(e);
      check_step_entry(e, fwd_.length(slot), opts_.max_context);
      out.tokens.assign(1, s.qs->prefill(slot, e.tokens));
      out.cache_length = fwd_.length(slot);
      return;
    }
    const auto& [slot, s] = table_.of(e.seq);
    check_step_entry(e, fwd_.length(slot), opts_.max_context);
    if (e.tokens.size() != 1)
      throw std::runtime_error("a QuantSpec round starts from one pending token, got " +
                               std::to_string(e.tokens.size()));
    record_round(s.qs->round({&slot, 1}, {&e.tokens[0], 1}).front(), e.seq, out);
    out.cache_length = fwd_.length(slot);
  }

  void release(seq_id seq) override {
    fwd_.bind_thread();
    if (const int slot = table_.release(seq); slot >= 0) fwd_.truncate(slot, 0);
  }
  std::int64_t sequences() const override { return table_.size(); }
  // Packed tokens at the hierarchical cache's bytes per token (both nibble
  // planes), window tokens as bf16 rows.
  std::int64_t cache_bytes() const override { return table_.cache_bytes(fwd_, config_, fwd_opts_.kv); }

 private:
  static gamma_options gamma_of(gamma_options g) {
    g.max_gamma = std::min(g.max_gamma, gpu_max_gamma);
    return g;
  }
  static std::unique_ptr<cuda_model> make_model(const model_config& config, const model_weights& weights,
                                                const cuda_quantspec_step_options& opts) {
    auto m = std::make_unique<cuda_model>(config, weights, opts.device);
    m->make_draft(opts.draft.group, kernels::cuda::int4_gemv_layout(kernels::cuda::int4_gemv_default_version),
                  opts.draft.quantize_lm_head);
    return m;
  }

  // A prefill starts the sequence afresh in its slot (or a free one).
  cuda_slot_table<gpu_sequence>::entry& start(const step_entry& e) {
    auto& entry = table_.start(e.seq);
    fwd_.truncate(entry.slot, 0);
    try {
      entry.state.qs = std::make_unique<cuda_quantspec>(fwd_, e.sampling, gamma_of(opts_.gamma));
    } catch (...) {
      table_.release(e.seq);
      throw;
    }
    return entry;
  }

  model_config config_;
  cuda_quantspec_step_options opts_;
  cuda_forward_options fwd_opts_;
  std::unique_ptr<cuda_model> model_;
  cuda_forward fwd_;
  cuda_slot_table<gpu_sequence> table_;
};

}  // namespace

std::shared_ptr<step_compute> make_cuda_quantspec_step_compute(const model_config& config,
                                                               const model_weights& weights,
                                                               const cuda_quantspec_step_options& opts) {
  return std::make_shared<cuda_quantspec_step_compute>(config, weights, opts);
}

std::size_t cuda_quantspec_step_device_bytes(const model_config& config, const cuda_quantspec_step_options& opts) {
  return cuda_model::weight_bytes(config) + draft_bytes(config, opts.draft) +
         cuda_forward::device_bytes(config, forward_options(opts));
}

}  // namespace specpipe
