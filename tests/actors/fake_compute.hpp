#pragma once
// A test double for a worker's compute: same interface as the CPU backend,
// tiny and predictable. Token t is always followed by (t + 1) % vocab; every
// K|V row's bytes encode (sequence, layer, head, position), so a test can
// check that fetched rows are the right ones and were complete when read.
// Knobs: a delay per run, a failure after N runs, speculative scores (sent
// to the planner a layer at a time, the next step's rows collected), rows
// the store refuses.
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "actors/step_compute.hpp"
#include "actors/trace_event.hpp"

namespace specpipe::testing {

inline constexpr int fake_layers = 2, fake_heads = 2, fake_head_dim = 4, fake_vocab = 32;

inline std::uint16_t fake_row_word(seq_id seq, int layer, int head, std::int64_t pos, int i) {
  return std::uint16_t((seq * 7919 + std::uint64_t(layer) * 131 + std::uint64_t(head) * 31 + std::uint64_t(pos) * 3 +
                        std::uint64_t(i)) & 0xffff);
}

struct fake_counters {
  std::atomic<int> runs{0};
  std::atomic<int> active{0};       // runs in progress, over all fakes sharing this
  std::atomic<int> max_active{0};
  std::atomic<int> fetched_steps{0};
  std::atomic<int> fetched_not_ready{0};   // read before the transfer completed
  std::atomic<int> fetched_wrong_rows{0};  // rows that are not the ones asked for
  std::atomic<int> fetched_missing{0};     // decode steps without a ticket per layer
};

class fake_compute final : public step_compute {
 public:
  struct options {
    std::chrono::milliseconds delay{0};
    int fail_after_runs = -1;  // throw from the run with this index (0-based); -1: never
    bool scores = false;       // attach speculative scores (peaked at the newest positions)
    int bad_rows_at_run = -1;  // the run with this index returns rows the store must refuse; -1: never
    std::int64_t max_context = 1 << 20;
    // The first run of this fake waits (up to 5 s) until this many runs are in
    // progress over all fakes sharing the counters: a test of concurrency
    // then depends on the pipeline, not on how the OS schedules threads.
    int rendezvous = 0;
  };

  fake_compute(options o, std::shared_ptr<fake_counters> c) : opts_(o), counters_(std::move(c)) {}

  compute_shape shape() const override { return {fake_layers, fake_heads, fake_head_dim, fake_vocab, opts_.scores}; }

  void run(const step_entry& e, step_output& out) override {
    const int n = runs_++;
    counters_->runs++;
    const int now = ++counters_->active;
    for (int m = counters_->max_active.load(); now > m && !counters_->max_active.compare_exchange_weak(m, now);) {}
    struct leave {
      std::atomic<int>& a;
      ~leave() { --a; }
    } guard{counters_->active};
    if (opts_.rendezvous > 0 && n == 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (counters_->max_active.load() < opts_.rendezvous && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (opts_.fail_after_runs >= 0 && n >= opts_.fail_after_runs) throw std::runtime_error("injected device fault");
    if (opts_.delay.count() > 0) std::this_thread::sleep_for(opts_.delay);
    for (const auto& f : e.fetched) check_fetched(*f);
    if (opts_.scores && e.phase == seq_phase::decode && e.fetched.size() != std::size_t(fake_layers))
      counters_->fetched_missing++;
    std::int64_t& len = lengths_[e.seq];
    if (e.phase == seq_phase::prefill) len = 0;
    if (len != e.pos0) throw std::runtime_error("fake: step at " + std::to_string(e.pos0) + ", cache at " + std::to_string(len));
    const auto n_tok = std::int64_t(e.tokens.size());
    auto rows = std::make_shared<kv_rows>();
    rows->seq = e.seq;
    rows->pos0 = e.pos0;
    rows->n_tokens = n_tok;
    rows->n_layers = fake_layers;
    rows->n_kv_heads = fake_heads;
    rows->row_bytes = 4 * fake_head_dim;
    rows->data.resize(std::size_t(n_tok) * fake_layers * fake_heads * rows->row_bytes);
    auto* w = reinterpret_cast<std::uint16_t*>(rows->data.data());
    for (std::int64_t t = 0; t < n_tok; ++t)
      for (int l = 0; l < fake_layers; ++l)
        for (int h = 0; h < fake_heads; ++h)
          for (int i = 0; i < 2 * fake_head_dim; ++i) *w++ = fake_row_word(e.seq, l, h, e.pos0 + t, i);
    len += n_tok;
    if (n == opts_.bad_rows_at_run) rows->n_layers = fake_layers + 1;  // data no longer matches the shape
    out.rows = rows;
    out.cache_length = len;
    out.logits.assign(fake_vocab, 0.0f);
    out.logits[std::size_t((e.tokens.back() + 1) % fake_vocab)] = 1.0f;
    if (opts_.scores) {
      // One layer at a time, as a real compute sends them while it runs.
      for (int l = 0; l < fake_layers; ++l) {
        auto s = std::make_shared<spec_scores>();
        s->seq = e.seq;
        s->layer0 = l;
        s->n_layers = 1;
        s->n_kv_heads = fake_heads;
        s->group = 2;
        s->n_positions = len;
        s->query_position = len;
        s->probs.resize(std::size_t(fake_heads * 2 * len));
        for (std::size_t i = 0; i < s->probs.size(); ++i) s->probs[i] = float(i % std::size_t(len)) / float(len);
        link_.prefetch(s);
      }
      out.plan_position = len;
      out.plan_layers = fake_layers;
    }
  }

  void attach(speculation_link link) override { link_ = std::move(link); }
  void release(seq_id seq) override { lengths_.erase(seq); }
  std::int64_t sequences() const override { return std::int64_t(lengths_.size()); }
  std::int64_t cache_bytes() const override {
    std::int64_t b = 0;
    for (const auto& [s, n] : lengths_) b += n * fake_layers * fake_heads * 4 * fake_head_dim;
    return b;
  }

 private:
  // As a real compute does: wait for the layer's rows, then read them.
  void check_fetched(const fetched_rows& f) {
    counters_->fetched_steps++;
    const double t0 = trace_now_us();
    if (!f.done->wait().empty() || !f.done->ready()) counters_->fetched_not_ready++;
    if (link_.consumed) link_.consumed(f, t0, trace_now_us());
    std::int64_t i = 0;
    for (const auto& sel : f.selections)
      for (const std::int64_t p : sel.positions) {
        const auto* w = reinterpret_cast<const std::uint16_t*>(f.row(i++));
        for (int k = 0; k < 2 * fake_head_dim; ++k)
          if (w[k] != fake_row_word(f.seq, sel.layer, sel.kv_head, p, k)) {
            counters_->fetched_wrong_rows++;
            break;
          }
      }
  }

  options opts_;
  std::shared_ptr<fake_counters> counters_;
  std::unordered_map<seq_id, std::int64_t> lengths_;
  int runs_ = 0;
  speculation_link link_;
};

}  // namespace specpipe::testing
