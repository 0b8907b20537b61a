#include "actors/quantspec_step_compute.hpp"

#include <chrono>
#include <stdexcept>
#include <unordered_map>

#include "actors/kv_capture.hpp"
#include "actors/trace_event.hpp"
#include "model/forward.hpp"
#include "model/hier_cache.hpp"
#include "model/quantspec.hpp"

namespace specpipe {
namespace {

// One sequence: its cache (the capture wrapping the hierarchical cache) and
// the decoder over it. Heap-held, so the decoder's references stay valid.
struct quantspec_sequence {
  hier_cache* hier = nullptr;  // owned by `cache`
  std::unique_ptr<capturing_cache> cache;
  std::unique_ptr<quantspec_decoder> decoder;
};

class quantspec_step_compute final : public step_compute {
 public:
  quantspec_step_compute(const model_config& config, const model_weights& weights, const quantspec_step_options& opts)
      : config_(config), opts_(opts), fwd_(config, weights, opts.threads),
        draft_(config, weights, opts.draft, &fwd_.pool()) {
    if (opts.max_context <= 0) throw std::invalid_argument("quantspec step compute: max_context must be > 0");
    gamma_controller check(opts.gamma);  // bad gamma options fail here, not at the first request
  }

  compute_shape shape() const override {
    compute_shape s{int(config_.num_hidden_layers), int(config_.num_key_value_heads), int(config_.head_dim),
                    config_.vocab_size};
    s.multi_token = true;
    return s;
  }

  void run(const step_entry& e, step_output& out) override {
    auto it = seqs_.find(e.seq);
    if (e.phase == seq_phase::prefill) {
      if (it != seqs_.end()) seqs_.erase(it);
      it = seqs_.emplace(e.seq, start(e.sampling)).first;
    } else if (it == seqs_.end()) {
      throw std::runtime_error("decode step for a sequence without a cache (no prefill ran)");
    }
    quantspec_sequence& s = it->second;
    if (s.cache->length(0) != e.pos0)
      throw std::runtime_error("step at position " + std::to_string(e.pos0) + " but the cache holds " +
                               std::to_string(s.cache->length(0)) + " tokens");
    if (e.tokens.empty()) throw std::runtime_error("step without tokens");
    s.cache->begin_step();
    if (e.phase == seq_phase::prefill) {
      if (e.pos0 + std::int64_t(e.tokens.size()) > opts_.max_context)
        throw std::runtime_error(std::to_string(e.pos0 + std::int64_t(e.tokens.size())) +
                                 " tokens exceed the cache of " + std::to_string(opts_.max_context));
      out.tokens.assign(1, s.decoder->prefill(e.tokens));
    } else {
      if (e.tokens.size() != 1)
        throw std::runtime_error("a QuantSpec round starts from one pending token, got " +
                                 std::to_string(e.tokens.size()));
      record_round(s.decoder->round(e.tokens[0], opts_.max_context), e.seq, out);
    }
    out.cache_length = s.cache->length(0);
    out.rows = pack_kv_rows(e.seq, *s.cache, int(config_.num_hidden_layers), int(config_.num_key_value_heads),
                            config_.head_dim);
  }

  void release(seq_id seq) override { seqs_.erase(seq); }
  std::int64_t sequences() const override { return std::int64_t(seqs_.size()); }
  std::int64_t cache_bytes() const override {
    std::int64_t b = 0;
    for (const auto& [id, s] : seqs_) b += std::int64_t(s.cache->bytes_used());
    return b;
  }

 private:
  quantspec_sequence start(const sampling_params& sampling) {
    quantspec_sequence s;
    auto hier = std::make_unique<hier_cache>(config_, opts_.max_context, hier_options{opts_.kv_group, hier_read::int8},
                                             &fwd_.pool());
    s.hier = hier.get();
    s.cache = std::make_unique<capturing_cache>(std::move(hier), int(config_.num_hidden_layers), config_.kv_dim());
    // Sampled output depends on the gammas chosen: an adaptive schedule then
    // uses the estimated cost ratio, not a measured one, so the seed alone
    // decides the output (model/gamma_controller.hpp).
    gamma_options gamma = opts_.gamma;
    if (gamma.adaptive && sampling.temperature > 0 && gamma.fixed_cost_ratio <= 0)
      gamma.fixed_cost_ratio = draft_cost_estimate(config_, opts_.draft);
    s.decoder = std::make_unique<quantspec_decoder>(fwd_, draft_.set(), *s.cache, *s.hier, sampling, gamma);
    return s;
  }

  model_config config_;
  quantspec_step_options opts_;
  cpu_forward fwd_;
  draft_weights draft_;
  std::unordered_map<seq_id, quantspec_sequence> seqs_;
};

}  // namespace

void record_round(const quantspec_round& r, seq_id seq, step_output& out) {
  out.tokens = r.tokens;
  out.spec.add_round(r.drafted, r.accepted, r.draft_seconds(), r.verify_seconds());
  // Microseconds between the steady clock and the trace clock, for the spans.
  const double offset_us =
      trace_now_us() -
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
  const auto us = [offset_us](std::chrono::steady_clock::time_point t) {
    return offset_us + std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
  };
  if (r.drafted > 0)
    out.spans.push_back(
        {"draft", us(r.draft_begin), us(r.verify_begin), {{"seq", double(seq)}, {"gamma", double(r.drafted)}}});
  out.spans.push_back({"verify", us(r.verify_begin), us(r.verify_end),
                       {{"seq", double(seq)}, {"tokens", double(r.drafted + 1)}, {"accepted", double(r.accepted)}}});
}

std::shared_ptr<step_compute> make_quantspec_step_compute(const model_config& config, const model_weights& weights,
                                                          const quantspec_step_options& opts) {
  return std::make_shared<quantspec_step_compute>(config, weights, opts);
}

}  // namespace specpipe
