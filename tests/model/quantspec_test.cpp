// QuantSpec rounds over one hierarchical cache: greedy output equals the
// target's own greedy decoding, rollback keeps exactly the accepted rows and
// never re-quantizes, the cache length is right after every round, sampling
// is reproducible per seed.
#include "model/quantspec.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "model/draft_weights.hpp"
#include "model/quant_cache_support.hpp"
#include "support/random_weights.hpp"

namespace specpipe {
namespace {

model_config tiny_config() {
  model_config c;
  c.model_type = "llama";
  c.vocab_size = 97;
  c.hidden_size = 128;
  c.intermediate_size = 200;  // a short last weight group (128 + 72)
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 1;
  c.head_dim = 64;
  c.max_position_embeddings = 512;
  c.rope.theta = 10000.0;
  return c;
}

// Forwards to the hierarchical cache and remembers each layer's last append:
// after a round, that is the verify's rows.
class recording_cache final : public cache_policy {
 public:
  recording_cache(hier_cache& inner, std::int64_t kv_dim, int layers)
      : inner_(inner), kv_dim_(kv_dim), k_(std::size_t(layers)), v_(std::size_t(layers)), pos0_(std::size_t(layers)) {}
  std::int64_t length(int layer) const override { return inner_.length(layer); }
  void append(int layer, const float* k, const float* v, std::int64_t n) override {
    pos0_[std::size_t(layer)] = inner_.length(layer);
    k_[std::size_t(layer)].assign(k, k + n * kv_dim_);
    v_[std::size_t(layer)].assign(v, v + n * kv_dim_);
    inner_.append(layer, k, v, n);
  }
  void attend(int layer, const float* q, std::int64_t n, std::int64_t pos0, float* out) override {
    inner_.attend(layer, q, n, pos0, out);
  }
  void truncate(std::int64_t n) override { inner_.truncate(n); }
  std::size_t bytes_used() const override { return inner_.bytes_used(); }

  // Row `pos` of the last append of `layer`, keys then values.
  std::vector<float> appended(int layer, std::int64_t pos) const {
    const auto l = std::size_t(layer);
    const std::int64_t i = pos - pos0_[l];
    std::vector<float> r(k_[l].begin() + i * kv_dim_, k_[l].begin() + (i + 1) * kv_dim_);
    r.insert(r.end(), v_[l].begin() + i * kv_dim_, v_[l].begin() + (i + 1) * kv_dim_);
    return r;
  }

 private:
  hier_cache& inner_;
  std::int64_t kv_dim_;
  std::vector<std::vector<float>> k_, v_;
  std::vector<std::int64_t> pos0_;
};

std::vector<float> window_row(const hier_cache& c, int layer, std::int64_t pos, std::int64_t kv_dim) {
  const std::int64_t i = pos - c.quantized(layer);
  std::vector<float> r(c.window_keys(layer) + i * kv_dim, c.window_keys(layer) + (i + 1) * kv_dim);
  r.insert(r.end(), c.window_values(layer) + i * kv_dim, c.window_values(layer) + (i + 1) * kv_dim);
  return r;
}

// The packed bytes of the first `tokens` quantized positions of a layer, in
// packed_bytes' order: what must never change once written.
std::vector<std::uint8_t> packed_prefix(const hier_cache& c, int layer, std::int64_t tokens) {
  const kv_layout& L = c.layout();
  const auto p = c.packed(layer, true);
  const std::int64_t blocks = tokens / L.group * L.n_kv_heads, rows = tokens * L.n_kv_heads;
  std::vector<std::uint8_t> out;
  auto put = [&](const void* data, std::int64_t bytes) {
    const auto* b = static_cast<const std::uint8_t*>(data);
    out.insert(out.end(), b, b + bytes);
  };
  put(p.k_codes, blocks * L.key_block_bytes());
  put(p.k_lower, blocks * L.key_block_bytes());
  put(p.k_scale, blocks * L.head_dim * 2);
  put(p.k_zero, blocks * L.head_dim * 2);
  put(p.v_codes, rows * L.value_row_bytes());
  put(p.v_lower, rows * L.value_row_bytes());
  put(p.v_scale, rows * L.value_groups() * 2);
  put(p.v_zero, rows * L.value_groups() * 2);
  return out;
}

struct run_result {
  std::vector<std::int32_t> tokens;
  spec_decode_stats stats;
};

// QuantSpec decoding of `steps` tokens, checking the cache after every round.
run_result quantspec_decode(cpu_forward& fwd, const weight_set& draft, const std::vector<std::int32_t>& prompt,
                            int steps, std::int64_t group, const sampling_params& sp, const gamma_options& go) {
  const model_config& c = fwd.config();
  const std::int64_t max_len = std::int64_t(prompt.size()) + steps + 1;
  hier_cache hier(c, max_len, {group, hier_read::int8}, &fwd.pool());
  recording_cache rec(hier, c.kv_dim(), int(c.num_hidden_layers));
  quantspec_decoder dec(fwd, draft, rec, hier, sp, go);
  run_result out;
  std::int32_t pending = dec.prefill(prompt);
  out.tokens.push_back(pending);
  while (int(out.tokens.size()) < steps) {
    const std::int64_t base = hier.length(0);
    std::vector<std::int64_t> q_before;
    std::vector<std::vector<std::uint8_t>> bytes_before;
    for (int l = 0; l < int(c.num_hidden_layers); ++l) {
      q_before.push_back(hier.quantized(l));
      bytes_before.push_back(hier.packed_bytes(l));
    }
    const quantspec_round r = dec.round(pending, max_len);
    EXPECT_EQ(r.tokens.size(), std::size_t(r.accepted + 1));
    EXPECT_LE(r.drafted, go.max_gamma);
    for (int l = 0; l < int(c.num_hidden_layers); ++l) {
      SCOPED_TRACE("round at " + std::to_string(base) + ", layer " + std::to_string(l));
      // The pending token and the kept drafts, nothing more or less.
      EXPECT_EQ(hier.length(l), base + 1 + r.accepted);
      // Quantized groups hold accepted tokens only, and the old ones are untouched.
      EXPECT_LE(hier.quantized(l), base);
      if (hier.quantized(l) == q_before[std::size_t(l)])
        EXPECT_EQ(hier.packed_bytes(l), bytes_before[std::size_t(l)]);
      else
        EXPECT_EQ(packed_prefix(hier, l, q_before[std::size_t(l)]).size(), bytes_before[std::size_t(l)].size());
      // The kept rows are the target's (the verify's), not the draft's.
      for (std::int64_t pos = std::max(base, hier.quantized(l)); pos < hier.length(l); ++pos)
        EXPECT_EQ(window_row(hier, l, pos, c.kv_dim()), rec.appended(l, pos)) << "position " << pos;
    }
    out.tokens.insert(out.tokens.end(), r.tokens.begin(), r.tokens.end());
    pending = r.tokens.back();
  }
  out.tokens.resize(std::size_t(steps));
  out.stats = dec.stats();
  return out;
}

std::vector<std::int32_t> target_greedy(cpu_forward& fwd, const std::vector<std::int32_t>& prompt, int steps,
                                        std::int64_t group) {
  hier_cache hier(fwd.config(), std::int64_t(prompt.size()) + steps + 1, {group, hier_read::int8}, &fwd.pool());
  return test::greedy(fwd, hier, prompt, steps);
}

sampling_params greedy_params() {
  sampling_params sp;
  sp.temperature = 0;
  return sp;
}

TEST(QuantSpec, GreedyEqualsTheTargetOnARandomModel) {
  const auto c = tiny_config();
  test::random_weights w(c, 11, 0.12f, dtype::bf16);
  cpu_forward fwd(c, w.w, 2);
  draft_weights draft(c, w.w, {}, &fwd.pool());
  std::vector<std::int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(std::int32_t((i * 37 + 5) % c.vocab_size));
  for (const std::int64_t group : {std::int64_t(128), std::int64_t(16)}) {
    SCOPED_TRACE("G " + std::to_string(group));
    const auto ref = target_greedy(fwd, prompt, 120, group);
    for (const char* g : {"1", "4", "7"}) {
      const auto got = quantspec_decode(fwd, draft.set(), prompt, 120, group, greedy_params(), parse_gamma(g));
      EXPECT_EQ(got.tokens, ref) << "gamma " << g;
      EXPECT_GT(got.stats.drafts, 0);
    }
  }
}

TEST(QuantSpec, GreedyEqualsTheTargetOnTheDefaultModel) {
  const model m = model::load(test::default_model_dir());
  cpu_forward fwd(m.config, m.weights, 2);
  draft_weights draft(m.config, m.weights, {}, &fwd.pool());
  const auto prompt = test::long_prompt(m);
  // G = 32: groups are quantized during the rounds (the prompt alone fills
  // several), so rollback happens next to flushes.
  const auto ref = target_greedy(fwd, prompt, 96, 32);
  const auto fixed = quantspec_decode(fwd, draft.set(), prompt, 96, 32, greedy_params(), parse_gamma("5"));
  EXPECT_EQ(fixed.tokens, ref);
  const auto adaptive = quantspec_decode(fwd, draft.set(), prompt, 96, 32, greedy_params(), parse_gamma("auto"));
  EXPECT_EQ(adaptive.tokens, ref);
  // The trained model's 4-bit draft agrees with it most of the time.
  EXPECT_GT(fixed.stats.acceptance_rate(), 0.5) << fixed.stats.summary();
}

TEST(QuantSpec, SamplingIsReproduciblePerSeed) {
  const auto c = tiny_config();
  test::random_weights w(c, 12, 0.12f, dtype::bf16);
  cpu_forward fwd(c, w.w, 2);
  draft_weights draft(c, w.w, {}, &fwd.pool());
  const std::vector<std::int32_t> prompt{1, 2, 3, 4, 5, 6, 7, 8};
  sampling_params sp;
  sp.temperature = 0.9f;
  sp.top_k = 40;
  sp.seed = 5;
  const auto a = quantspec_decode(fwd, draft.set(), prompt, 60, 16, sp, parse_gamma("4"));
  const auto b = quantspec_decode(fwd, draft.set(), prompt, 60, 16, sp, parse_gamma("4"));
  EXPECT_EQ(a.tokens, b.tokens);
  sp.seed = 6;
  const auto other = quantspec_decode(fwd, draft.set(), prompt, 60, 16, sp, parse_gamma("4"));
  EXPECT_NE(a.tokens, other.tokens);
  EXPECT_GT(a.stats.draft_tokens, 0);
}

TEST(QuantSpec, GammaShrinksToTheRoomLeftAndTheDoubleBuffer) {
  const auto c = tiny_config();
  test::random_weights w(c, 13, 0.12f, dtype::bf16);
  cpu_forward fwd(c, w.w, 2);
  draft_weights draft(c, w.w, {}, &fwd.pool());
  const std::vector<std::int32_t> prompt{3, 1, 4, 1, 5};
  hier_cache hier(c, 64, {8, hier_read::int8}, &fwd.pool());
  quantspec_decoder dec(fwd, draft.set(), hier, hier, greedy_params(), parse_gamma("16"));
  const std::int32_t first = dec.prefill(prompt);
  const auto r = dec.round(first, 64);
  EXPECT_EQ(r.drafted, 8);  // gamma <= G keeps rollback inside the double buffer
  const auto near_end = dec.round(r.tokens.back(), hier.length(0) + 3);
  EXPECT_EQ(near_end.drafted, 2);  // the verify's gamma + 1 rows must fit
  EXPECT_LE(hier.length(0), 64);
  EXPECT_THROW(dec.round(near_end.tokens.back(), hier.length(0)), std::length_error);
}

// The ablations (draft_parts): without both approximations the draft is
// the target, so greedy verification keeps every draft; with only one of
// them the draft still differs from the target somewhere on a random model.
TEST(QuantSpec, DraftWithoutItsApproximationsIsTheTarget) {
  const auto c = tiny_config();
  test::random_weights w(c, 15, 0.12f, dtype::bf16);
  cpu_forward fwd(c, w.w, 2);
  draft_weights draft(c, w.w, {}, &fwd.pool());
  const std::vector<std::int32_t> prompt{2, 7, 1, 8, 2, 8, 1, 8, 2, 8};
  auto run = [&](draft_parts parts) {
    hier_cache hier(c, 200, {8, hier_read::int8}, &fwd.pool());
    quantspec_decoder dec(fwd, draft.set(), hier, hier, greedy_params(), parse_gamma("4"), parts);
    std::int32_t pending = dec.prefill(prompt);
    while (hier.length(0) + 6 < 160) pending = dec.round(pending, 200).tokens.back();
    return dec.stats();
  };
  const auto same = run({false, false});
  EXPECT_GT(same.draft_tokens, 100);
  EXPECT_EQ(same.accepted_tokens, same.draft_tokens);
  // Each approximation alone: the 4-bit weights on a random model reject
  // some drafts (the KV alone may or may not over this short context).
  const auto weights_only = run({true, false});
  EXPECT_LT(weights_only.accepted_tokens, weights_only.draft_tokens);
  const auto kv_only = run({false, true});
  EXPECT_LE(kv_only.accepted_tokens, kv_only.draft_tokens);
  EXPECT_GT(kv_only.draft_tokens, 0);
}

TEST(DraftWeights, PackEveryProjectionAndReportTheirBytes) {
  const auto c = tiny_config();
  test::random_weights w(c, 14, 0.12f, dtype::bf16);
  draft_weights shared(c, w.w, {});
  EXPECT_EQ(shared.bytes(), draft_bytes(c, {}));
  EXPECT_FALSE(shared.set().lm_head.is_int4());
  EXPECT_TRUE(shared.set().layers[1].w_down.is_int4());
  draft_options all;
  all.quantize_lm_head = true;
  draft_weights packed(c, w.w, all);
  EXPECT_TRUE(packed.set().lm_head.is_int4());
  EXPECT_EQ(packed.bytes(), draft_bytes(c, all));
  // q,k,v: 256, 64, 64 rows of 128; o: 128 rows of 256; gate, up: 200 rows of 128; down: 128 rows of 200.
  // Codes pad rows to 16 bytes; an f16 scale and zero per 128 columns (or fewer).
  const std::size_t per_layer = (256 + 64 + 64) * (64 + 4) + 128 * (128 + 8) + 2 * 200 * (64 + 4) + 128 * (112 + 8);
  EXPECT_EQ(shared.bytes(), 2 * per_layer);
  EXPECT_NE(describe_draft_memory(c, {}).find("lm_head shared"), std::string::npos);
  // Bytes read per step: a shared 16-bit lm_head keeps the draft well above a quarter.
  const double shared_cost = draft_cost_estimate(c, {}), packed_cost = draft_cost_estimate(c, all);
  EXPECT_GT(shared_cost, packed_cost);
  EXPECT_GT(packed_cost, 0.25);  // codes plus scales and zeros, padded rows
  EXPECT_LT(shared_cost, 1.0);
}

TEST(DraftWeights, ForwardRejectsAMisshapenSet) {
  const auto c = tiny_config();
  test::random_weights w(c, 15, 0.12f, dtype::bf16);
  cpu_forward fwd(c, w.w, 1);
  draft_weights draft(c, w.w, {});
  weight_set bad = draft.set();
  bad.layers.pop_back();
  auto cache = make_full_cache(c, 8);
  std::vector<float> logits(std::size_t(c.vocab_size));
  const std::int32_t t[1] = {1};
  EXPECT_THROW(fwd.forward(t, *cache, logits, false, &bad), std::invalid_argument);
  weight_set swapped = draft.set();
  std::swap(swapped.layers[0].wq, swapped.layers[0].w_up);
  try {
    fwd.forward(t, *cache, logits, false, &swapped);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.self_attn.q_proj.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace specpipe
