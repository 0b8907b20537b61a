#include "actors/cuda_quantspec_step_compute.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/trace_event.hpp"
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
  if (o.draft.quantize_lm_head)
    throw std::invalid_argument("--draft-lm-head: the GPU draft shares lm_head with the target (use --device cpu)");
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

// One sequence: its slot and the rounds' driver (sampler, gamma controller).
struct gpu_sequence {
  int slot = 0;
  std::unique_ptr<cuda_quantspec> qs;
};

class cuda_quantspec_step_compute final : public step_compute {
 public:
  cuda_quantspec_step_compute(const model_config& config, const model_weights& weights,
                              const cuda_quantspec_step_options& opts)
      : config_(config), opts_(opts), fwd_opts_(forward_options(opts)), model_(make_model(config, weights, opts)),
        fwd_(*model_, fwd_opts_) {
    gamma_controller check(gamma_of(opts.gamma));  // bad gamma options fail here, not at the first request
    for (int s = opts.max_sequences - 1; s >= 0; --s) free_.push_back(s);
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
      gpu_sequence& s = start(e);
      check_step_entry(e, fwd_.length(s.slot), opts_.max_context);
      out.tokens.assign(1, s.qs->prefill(s.slot, e.tokens));
      out.cache_length = fwd_.length(s.slot);
      return;
    }
    const auto it = seqs_.find(e.seq);
    if (it == seqs_.end()) throw std::runtime_error("decode step for a sequence without a cache (no prefill ran)");
    gpu_sequence& s = it->second;
    check_step_entry(e, fwd_.length(s.slot), opts_.max_context);
    if (e.tokens.size() != 1)
      throw std::runtime_error("a QuantSpec round starts from one pending token, got " +
                               std::to_string(e.tokens.size()));
    const int slot = s.slot;
    const quantspec_round r = s.qs->round({&slot, 1}, {&e.tokens[0], 1}).front();
    out.tokens = r.tokens;
    out.spec.add_round(r.drafted, r.accepted, r.draft_seconds(), r.verify_seconds());
    const auto us = [](std::chrono::steady_clock::time_point t) {
      return trace_now_us() -
             std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
    };
    if (r.drafted > 0)
      out.spans.push_back({"draft", us(r.draft_begin), us(r.verify_begin),
                           {{"seq", double(e.seq)}, {"gamma", double(r.drafted)}}});
    out.spans.push_back({"verify", us(r.verify_begin), us(r.verify_end),
                         {{"seq", double(e.seq)}, {"tokens", double(r.drafted + 1)}, {"accepted", double(r.accepted)}}});
    out.cache_length = fwd_.length(slot);
  }

  void release(seq_id seq) override {
    const auto it = seqs_.find(seq);
    if (it == seqs_.end()) return;
    fwd_.bind_thread();
    fwd_.truncate(it->second.slot, 0);
    free_.push_back(it->second.slot);
    seqs_.erase(it);
  }
  std::int64_t sequences() const override { return std::int64_t(seqs_.size()); }
  // Packed tokens at the hierarchical cache's bytes per token (both nibble
  // planes), window tokens as bf16 rows.
  std::int64_t cache_bytes() const override {
    const double packed = cuda_forward::kv_bytes_per_token(config_, fwd_opts_.kv);
    const double rows = double(cuda_forward::kv_bytes_per_token(config_));
    double b = 0;
    for (const auto& [seq, s] : seqs_) {
      const std::int64_t q = fwd_.quantized(s.slot), len = fwd_.length(s.slot);
      b += double(q) * packed + double(len - q) * rows;
    }
    return std::int64_t(b);
  }

 private:
  static gamma_options gamma_of(gamma_options g) {
    g.max_gamma = std::min(g.max_gamma, gpu_max_gamma);
    return g;
  }
  static std::unique_ptr<cuda_model> make_model(const model_config& config, const model_weights& weights,
                                                const cuda_quantspec_step_options& opts) {
    auto m = std::make_unique<cuda_model>(config, weights, opts.device);
    m->make_draft(opts.draft.group);
    return m;
  }

  // A prefill starts the sequence afresh in a free slot (or its own).
  gpu_sequence& start(const step_entry& e) {
    int slot;
    if (const auto it = seqs_.find(e.seq); it != seqs_.end()) {
      slot = it->second.slot;
      seqs_.erase(it);
    } else {
      if (free_.empty())
        throw std::runtime_error("all " + std::to_string(opts_.max_sequences) +
                                 " sequence slots of this GPU worker are in use");
      slot = free_.back();
      free_.pop_back();
    }
    fwd_.truncate(slot, 0);
    gpu_sequence s;
    s.slot = slot;
    try {
      s.qs = std::make_unique<cuda_quantspec>(fwd_, e.sampling, gamma_of(opts_.gamma));
    } catch (...) {
      free_.push_back(slot);
      throw;
    }
    return seqs_.emplace(e.seq, std::move(s)).first->second;
  }

  model_config config_;
  cuda_quantspec_step_options opts_;
  cuda_forward_options fwd_opts_;
  std::unique_ptr<cuda_model> model_;
  cuda_forward fwd_;
  std::unordered_map<seq_id, gpu_sequence> seqs_;
  std::vector<int> free_;
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
