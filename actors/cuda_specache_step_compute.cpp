#include "actors/cuda_specache_step_compute.hpp"

#include <stdexcept>
#include <string>
#include <vector>

#include "actors/cuda_slot_table.hpp"
#include "actors/trace_event.hpp"
#include "model/cuda_forward.hpp"

namespace specpipe {
namespace {

cuda_forward_options forward_options(const cuda_specache_step_options& o) {
  if (o.max_context <= 0) throw std::invalid_argument("cuda specache step compute: max_context must be > 0");
  if (o.max_sequences <= 0) throw std::invalid_argument("cuda specache step compute: max_sequences must be > 0");
  if (!o.kv.speculative())
    throw std::invalid_argument("cuda specache step compute: the cache mode is " + o.kv.describe() +
                                ", not specache (actors/cuda_step_compute.hpp runs the others)");
  cuda_forward_options f;
  f.max_batch = o.max_sequences;
  f.max_context = o.max_context;
  f.kv = o.kv;
  f.specache_fetch = true;
  f.specache_hit_rate = o.kv.prefetch == specache_prefetch::speculative;
  f.specache_timeline = o.timeline;
  return f;
}

// A sequence's state beside its slot: its sampling and picks so far (the
// device sampler's draw counter), and the speculative token of its next step.
struct gpu_sequence {
  sampling_params sampling;
  std::uint64_t picks = 0;
  bool have_spec = false;  // a predecode seeded the slot's rows
  std::int32_t spec = 0;   // the speculative token of the next step
  std::int64_t guess_pos = -1;
  std::int32_t guess = 0;  // the previous speculative token, for the match rate
};

class cuda_specache_step_compute final : public step_compute {
 public:
  cuda_specache_step_compute(const model_config& config, const model_weights& weights,
                             const cuda_specache_step_options& opts)
      : config_(config),
        opts_(opts),
        fwd_opts_(forward_options(opts)),
        model_(config, weights, opts.device),
        fwd_(model_, fwd_opts_),
        track_base_("cuda " + std::to_string(opts.device) + " "),
        table_(opts.max_sequences) {}

  compute_shape shape() const override {
    compute_shape s{int(config_.num_hidden_layers), int(config_.num_key_value_heads), int(config_.head_dim),
                    config_.vocab_size};
    s.multi_token = true;  // the compute picks its tokens: no step is queued before the last one's pick
    return s;
  }
  const char* track_prefix() const override { return "cuda "; }

  void run(const step_entry& e, step_output& out) override {
    run_batch({&e, 1}, {&out, 1});
    if (!out.error.empty()) throw std::runtime_error(out.error);
  }

  void run_batch(std::span<const step_entry> entries, std::span<step_output> outs) override {
    fwd_.bind_thread();
    batch_.clear();
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const step_entry& e = entries[i];
      step_output& out = outs[i];
      if (!out.error.empty()) continue;
      try {
        if (e.tokens.empty()) throw std::runtime_error("a step without tokens");
        if (e.phase == seq_phase::prefill) {
          prefill(e, out);
          continue;
        }
        check_step_entry(e, fwd_.length(table_.of(e.seq).slot), opts_.max_context);
        if (e.tokens.size() != 1)
          throw std::runtime_error("a SpeCache step continues from one token, got " + std::to_string(e.tokens.size()));
        batch_.push_back(i);
      } catch (const std::exception& ex) {
        out.error = ex.what();
      }
    }
    if (!batch_.empty()) decode(entries, outs);
  }

  void release(seq_id seq) override {
    fwd_.bind_thread();
    if (const int slot = table_.release(seq); slot >= 0) fwd_.truncate(slot, 0);
  }
  std::int64_t sequences() const override { return table_.size(); }
  // The low-bit copy and the window on the device (the 16-bit store is host memory).
  std::int64_t cache_bytes() const override { return table_.cache_bytes(fwd_, config_, opts_.kv); }

 private:
  // A prefill starts the sequence afresh in its slot (or a free one).
  void prefill(const step_entry& e, step_output& out) {
    auto& entry = table_.start(e.seq);
    const int slot = entry.slot;
    gpu_sequence& s = entry.state;
    s.sampling = e.sampling;
    fwd_.truncate(slot, 0);
    check_step_entry(e, fwd_.length(slot), opts_.max_context);
    out.compute_start_us = trace_now_us();
    fwd_.prefill(slot, e.tokens);
    std::int32_t t = 0;
    fwd_.select(s.sampling, s.picks++, {&t, 1});
    out.compute_end_us = trace_now_us();
    out.compute_us = out.compute_end_us - out.compute_start_us;
    out.tokens.assign(1, t);
    out.cache_length = fwd_.length(slot);
  }

  // The decode entries batch_ of the step as one forward.
  void decode(std::span<const step_entry> entries, std::span<step_output> outs) {
    const std::size_t n = batch_.size();
    slots_.resize(n);
    tokens_.resize(n);
    specs_.resize(n);
    picked_.resize(n);
    for (std::size_t k = 0; k < n; ++k) {
      slots_[k] = table_.of(entries[batch_[k]].seq).slot;
      tokens_[k] = entries[batch_[k]].tokens[0];
    }
    const std::int64_t rows_before = fwd_.specache_rows_fetched();
    const auto hits_before = fwd_.specache_hits();
    const double t0 = trace_now_us();
    std::string error;
    try {
      if (opts_.kv.prefetch == specache_prefetch::output) {
        fwd_.specache_output_step(slots_, tokens_);
        for (std::size_t k = 0; k < n; ++k) pick_real(entries, k, std::int64_t(k));
      } else {
        seed_new_sequences(entries);
        for (std::size_t k = 0; k < n; ++k) specs_[k] = sequence(entries, k).spec;
        fwd_.specache_step(slots_, tokens_, specs_);
        sampling_params greedy;
        greedy.temperature = 0.f;
        for (std::size_t k = 0; k < n; ++k) {
          pick_real(entries, k, std::int64_t(2 * k));
          gpu_sequence& s = sequence(entries, k);
          const std::int64_t pos = fwd_.length(slots_[k]) - 1;  // the real token's position
          if (s.guess_pos == pos) {
            ++outs[batch_[k]].specache.guesses;
            if (s.guess == tokens_[k]) ++outs[batch_[k]].specache.guess_hits;
          }
          s.guess_pos = pos + 1;
          s.guess = s.spec;
          fwd_.select(greedy, 0, {&s.spec, 1}, std::int64_t(2 * k + 1), 1);  // the next speculative token
        }
      }
    } catch (const std::exception& ex) {
      error = ex.what();  // one forward: every entry of it failed
    }
    const double t1 = trace_now_us();
    std::vector<cuda_forward::gpu_span> timeline;
    if (opts_.timeline && error.empty()) timeline = fwd_.specache_timeline();
    const std::int64_t rows = fwd_.specache_rows_fetched() - rows_before;
    const auto hits = fwd_.specache_hits();
    for (std::size_t k = 0; k < n; ++k) {
      step_output& out = outs[batch_[k]];
      out.compute_start_us = t0;
      out.compute_end_us = t1;
      out.compute_us = (t1 - t0) / double(n);
      if (!error.empty()) {
        out.error = "batched SpeCache step of " + std::to_string(n) + " sequences: " + error;
        continue;
      }
      out.tokens.assign(1, picked_[k]);
      out.cache_length = fwd_.length(slots_[k]);
      out.specache.steps = 1;
      if (k == 0) {  // the step's fetch and hits are the batch's: counted once
        out.specache.rows_fetched = rows;
        out.specache.bytes_fetched = rows * 4 * config_.head_dim;
        out.specache.needed = hits.first - hits_before.first;
        out.specache.hits = hits.second - hits_before.second;
        add_timeline(timeline, t0, out);
      }
    }
  }

  // The state of batch entry k's sequence.
  gpu_sequence& sequence(std::span<const step_entry> entries, std::size_t k) {
    return table_.of(entries[batch_[k]].seq).state;
  }

  // The real row of batch entry k (logits row `row`) with its request's sampling.
  void pick_real(std::span<const step_entry> entries, std::size_t k, std::int64_t row) {
    gpu_sequence& s = sequence(entries, k);
    fwd_.select(s.sampling, s.picks++, {&picked_[k], 1}, row, 1);
  }

  // Sequences at their first decode step: a one-row predecode over the
  // low-bit cache fetches their first rows and gives their first
  // speculative token (greedy, as every speculative token).
  void seed_new_sequences(std::span<const step_entry> entries) {
    seed_slots_.clear();
    seed_tokens_.clear();
    seed_index_.clear();
    for (std::size_t k = 0; k < batch_.size(); ++k)
      if (!sequence(entries, k).have_spec) {
        seed_slots_.push_back(slots_[k]);
        seed_tokens_.push_back(tokens_[k]);
        seed_index_.push_back(k);
      }
    if (seed_slots_.empty()) return;
    fwd_.specache_predecode(seed_slots_, seed_tokens_);
    seed_specs_.resize(seed_slots_.size());
    sampling_params greedy;
    greedy.temperature = 0.f;
    fwd_.select(greedy, 0, seed_specs_);
    for (std::size_t j = 0; j < seed_index_.size(); ++j) {
      gpu_sequence& s = sequence(entries, seed_index_[j]);
      s.spec = seed_specs_[j];
      s.have_spec = true;
    }
  }

  // The step's GPU spans (ms from its start on the device) on the streams'
  // tracks, placed from the step's host start.
  void add_timeline(const std::vector<cuda_forward::gpu_span>& timeline, double t0, step_output& out) {
    if (timeline.empty()) return;
    out.device_spans = true;
    static const char* const streams[] = {"compute", "planner", "transfer"};
    for (const auto& sp : timeline) {
      step_output::phase_span p;
      p.name = sp.name;
      p.t0_us = t0 + sp.start_ms * 1e3;
      p.t1_us = t0 + sp.end_ms * 1e3;
      p.args = {{"layer", double(sp.layer)}};
      p.track = track_base_ + streams[sp.stream];
      p.cat = sp.stream == 2 ? trace_cat::transfer : trace_cat::compute;
      out.spans.push_back(std::move(p));
    }
  }

  model_config config_;
  cuda_specache_step_options opts_;
  cuda_forward_options fwd_opts_;
  cuda_model model_;
  cuda_forward fwd_;
  std::string track_base_;
  cuda_slot_table<gpu_sequence> table_;
  // Per-step scratch, kept so that steps do not allocate.
  std::vector<std::size_t> batch_, seed_index_;
  std::vector<int> slots_, seed_slots_;
  std::vector<std::int32_t> tokens_, specs_, picked_, seed_tokens_, seed_specs_;
};

}  // namespace

std::shared_ptr<step_compute> make_cuda_specache_step_compute(const model_config& config,
                                                              const model_weights& weights,
                                                              const cuda_specache_step_options& opts) {
  return std::make_shared<cuda_specache_step_compute>(config, weights, opts);
}

std::size_t cuda_specache_step_device_bytes(const model_config& config, const cuda_specache_step_options& opts) {
  return cuda_model::weight_bytes(config) + cuda_forward::device_bytes(config, forward_options(opts));
}

std::size_t cuda_specache_step_host_bytes(const model_config& config, const cuda_specache_step_options& opts) {
  return cuda_forward::specache_host_bytes(config, forward_options(opts));
}

}  // namespace specpipe
