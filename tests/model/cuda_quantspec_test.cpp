// QuantSpec on the GPU (model/cuda_quantspec.hpp and the pieces it adds to
// cuda_forward: draft weights quantized on the device, extend() with every
// row's logits): extend() against the same tokens decoded one at a time, the
// device draft against the CPU draft, greedy rounds against greedy decoding
// of the target alone, rollback bookkeeping, and seeded sampling. Skipped
// without a device.
//
// Token equality. The target-only decode runs each row through the GEMV and
// a one-row attention; the verify runs gamma + 1 rows through the same GEMV
// and a multi-query attention with its own split count, so the two sum in a
// different order and can part at a near-tie. A divergence is accepted only
// where the target-only run's top-2 logit margin was below 0.05 (a tie the
// summation order decides); anywhere else it fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/int4_gemv.hpp"
#include "kernels/int4_linear.hpp"
#include "kernels/int4_tiled.hpp"
#include "memory/allocator.hpp"
#include "model/cuda_forward.hpp"
#include "model/cuda_quantspec.hpp"
#include "model/draft_weights.hpp"
#include "model/forward.hpp"
#include "model/hier_cache.hpp"
#include "model/kv_mode.hpp"
#include "model/model.hpp"
#include "support/gpu_test.hpp"
#include "support/random_weights.hpp"
#include "support/test_util.hpp"
#include "support/test_paths.hpp"

namespace specpipe {
namespace {

using test::rel_error;

class cuda_quantspec_test : public test::gpu_test {};

// Device bytes of a draft in `layout`, from the layouts' own size rules:
// rows are draft_bytes()'s; tiles pad rows to 16 and inputs to 128 (this
// file's intermediate size, 704, is not a multiple of 128).
std::size_t expected_draft_bytes(const model_config& c, kernels::cuda::int4_layout layout, bool lm_head) {
  if (layout == kernels::cuda::int4_layout::rows) return draft_bytes(c, draft_options{128, lm_head});
  const std::int64_t h = c.hidden_size, inter = c.intermediate_size, g = 128;
  const std::int64_t shapes[][2] = {{c.q_dim() + 2 * c.kv_dim(), h}, {h, c.q_dim()}, {2 * inter, h}, {h, inter}};
  auto tiled = [&](std::int64_t out, std::int64_t in) {
    return std::size_t(kernels::cpu::int4_tiled_code_bytes(out, in) +
                       2 * kernels::cpu::int4_tiled_scale_zero_size(out, in, g));
  };
  std::size_t b = 0;
  for (const auto& [out, in] : shapes) b += tiled(out, in);
  b *= std::size_t(c.num_hidden_layers);
  return lm_head ? b + tiled(c.vocab_size, h) : b;
}

// GQA 4 (two verify rows per attention block) or MHA (up to eight).
model_config small_config(int heads, int kv_heads) {
  model_config c;
  c.model_type = "llama";
  c.vocab_size = 320;
  c.hidden_size = 256;
  c.intermediate_size = 704;
  c.num_hidden_layers = 3;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 64;
  c.max_position_embeddings = 4096;
  c.rope.theta = 10000.0;
  return c;
}

std::vector<std::int32_t> random_tokens(std::mt19937& rng, int n, std::int64_t vocab) {
  std::uniform_int_distribution<std::int32_t> u(0, std::int32_t(vocab - 1));
  std::vector<std::int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(u(rng));
  return t;
}

kv_mode hier(int read, std::int64_t group) { return parse_kv_mode("hier", read, group, 0); }

// extend(n) of two slots at once against the same rows decoded one at a
// time, from prompts that leave the window just below and exactly at the
// flush point (the flush then happens before the first row on both paths).
TEST_F(cuda_quantspec_test, extend_logits_equal_decode_logits) {
  for (const auto& [heads, kv_heads] : {std::pair{8, 2}, std::pair{4, 4}}) {
    const auto c = small_config(heads, kv_heads);
    const test::random_weights w(c, 41, 0.1f, dtype::bf16);
    const cuda_model gm(c, w.w);
    for (const kv_mode& mode : {kv_mode{}, hier(8, 64), hier(4, 64)}) {
      SCOPED_TRACE(mode.describe() + " heads " + std::to_string(heads) + "/" + std::to_string(kv_heads));
      cuda_forward_options o;
      o.max_batch = 2;
      o.max_context = 512;
      o.prefill_chunk = 64;
      o.kv = mode;
      o.max_step_tokens = 6;
      cuda_forward fwd(gm, o);
      std::mt19937 rng(7);
      // Slot 0: a window of 108 after the prompt (hier, G = 64: flushed at
      // 128). Slot 1: 20 more tokens decoded, a window of exactly 128, so
      // the extend flushes a group before its first row, as decode would.
      const auto p0 = random_tokens(rng, 300, c.vocab_size), p1 = random_tokens(rng, 300, c.vocab_size);
      fwd.prefill(0, p0);
      fwd.prefill(1, p1);
      const int one_slot = 1;
      for (const std::int32_t t : random_tokens(rng, 20, c.vocab_size)) fwd.decode(std::span(&one_slot, 1), std::span(&t, 1));
      const int n = 5;
      const auto rows = random_tokens(rng, 2 * n, c.vocab_size);
      const std::size_t V = std::size_t(c.vocab_size);
      std::vector<float> ext(2 * n * V);
      const int slots[] = {0, 1};
      const std::int64_t q0 = fwd.quantized(0), q1 = fwd.quantized(1);
      fwd.extend(slots, n, rows, ext);
      EXPECT_EQ(fwd.length(0), 300 + n);
      EXPECT_EQ(fwd.length(1), 320 + n);
      // Roll back (window rows only) and decode the same rows one by one.
      fwd.truncate(0, 300);
      fwd.truncate(1, 320);
      std::vector<float> one(2 * V);
      for (int j = 0; j < n; ++j) {
        const std::int32_t t[] = {rows[std::size_t(j)], rows[std::size_t(n + j)]};
        fwd.decode(slots, t, one);
        for (int i = 0; i < 2; ++i) {
          const double e = rel_error(ext.data() + (std::size_t(i) * n + std::size_t(j)) * V, one.data() + std::size_t(i) * V, V);
          EXPECT_LT(e, 1e-2) << "slot " << i << " row " << j;
        }
      }
      if (mode.format == kv_format::hier) {
        EXPECT_EQ(fwd.quantized(0), q0);
        EXPECT_EQ(fwd.quantized(1), q1 + 64) << "slot 1's window was at the flush point";
      }
      // A second extend replays the captured graph: the same logits again.
      fwd.truncate(0, 300);
      fwd.truncate(1, 320);
      std::vector<float> again(2 * n * V);
      fwd.extend(slots, n, rows, again);
      fwd.truncate(0, 300);
      fwd.truncate(1, 320);
      fwd.extend(slots, n, rows, again);
      EXPECT_LT(rel_error(again.data(), ext.data(), again.size()), 1e-5);
    }
  }
}

// The device's 4-bit projections against the CPU draft (the same codes:
// both quantize the same bf16 weights), over a window-only hierarchical
// cache read as INT4: the full-precision parity bound of 2e-2.
TEST_F(cuda_quantspec_test, draft_forward_matches_the_cpu_draft) {
  const auto c = small_config(8, 2);
  const test::random_weights w(c, 43, 0.1f, dtype::bf16);
  cuda_model gm(c, w.w);
  EXPECT_FALSE(gm.has_draft());
  gm.make_draft(128);
  EXPECT_TRUE(gm.has_draft());
  EXPECT_EQ(gm.draft_bytes(), expected_draft_bytes(c, gm.draft_layout(), false));
  cuda_model rows(c, w.w);  // the row layout takes exactly the CPU draft's bytes
  rows.make_draft(128, kernels::cuda::int4_layout::rows);
  EXPECT_EQ(rows.draft_bytes(), draft_bytes(c, draft_options{}));
  EXPECT_THROW(gm.make_draft(128), std::logic_error);

  cpu_forward cpu(c, w.w, 2);
  const draft_weights draft(c, w.w, {}, &cpu.pool());
  std::mt19937 rng(9);
  const auto prompt = random_tokens(rng, 40, c.vocab_size);
  const int steps = 12;
  hier_cache cache(c, 64, {64, hier_read::int4}, &cpu.pool());
  cuda_forward_options o;
  o.max_context = 64;
  o.kv = hier(4, 64);
  cuda_forward fwd(gm, o);
  fwd.set_draft_weights(true);
  const std::size_t V = std::size_t(c.vocab_size);
  std::vector<float> want(V), got(V);
  cpu.forward(prompt, cache, want, false, &draft.set());
  fwd.prefill(0, prompt, got);
  EXPECT_LT(rel_error(got.data(), want.data(), V), 2e-2) << "prefill";
  const int slot = 0;
  for (int s = 0; s < steps; ++s) {
    const std::int32_t t = std::int32_t(std::max_element(want.begin(), want.end()) - want.begin());
    cpu.forward(std::span(&t, 1), cache, want, false, &draft.set());
    fwd.decode(std::span(&slot, 1), std::span(&t, 1), got);
    EXPECT_LT(rel_error(got.data(), want.data(), V), 2e-2) << "step " << s;
  }
  // And the draft is not the target: switching back changes the logits.
  fwd.set_draft_weights(false);
  fwd.truncate(0, fwd.length(0) - 1);
  const std::int32_t t = 3;
  std::vector<float> target(V);
  fwd.decode(std::span(&slot, 1), std::span(&t, 1), target);
  fwd.truncate(0, fwd.length(0) - 1);
  fwd.set_draft_weights(true);
  fwd.decode(std::span(&slot, 1), std::span(&t, 1), got);
  EXPECT_GT(rel_error(got.data(), target.data(), V), 1e-3);
}

// --draft-lm-head on the GPU: the draft multiplies by its own 4-bit lm_head
// (the embedding's rows when tied), as the CPU draft does with
// draft_options::quantize_lm_head; the 16-bit forward keeps the bf16 one.
TEST_F(cuda_quantspec_test, a_draft_with_its_own_lm_head_matches_the_cpu_draft) {
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied embedding" : "own lm_head");
    auto c = small_config(8, 2);
    c.tie_word_embeddings = tied;
    test::random_weights w(c, 44, 0.1f, dtype::bf16);
    if (tied) w.w.lm_head = w.w.embed;
    const draft_options dopts{128, true};
    cuda_model gm(c, w.w), shared(c, w.w);
    gm.make_draft(128, kernels::cuda::int4_gemv_layout(kernels::cuda::int4_gemv_default_version), true);
    shared.make_draft(128);
    EXPECT_TRUE(gm.draft_lm_head());
    EXPECT_FALSE(shared.draft_lm_head());
    EXPECT_EQ(gm.draft_bytes(), expected_draft_bytes(c, gm.draft_layout(), true));
    // lm_head's shape (320 x 256) is whole tiles: it adds the CPU's bytes.
    EXPECT_EQ(gm.draft_bytes() - shared.draft_bytes(), draft_bytes(c, dopts) - draft_bytes(c, draft_options{}));

    cpu_forward cpu(c, w.w, 2);
    const draft_weights draft(c, w.w, dopts, &cpu.pool());
    std::mt19937 rng(10);
    const auto prompt = random_tokens(rng, 40, c.vocab_size);
    hier_cache cache(c, 64, {64, hier_read::int4}, &cpu.pool());
    cuda_forward_options o;
    o.max_context = 64;
    o.kv = hier(4, 64);
    cuda_forward fwd(gm, o), fs(shared, o);
    fwd.set_draft_weights(true);
    fs.set_draft_weights(true);
    const std::size_t V = std::size_t(c.vocab_size);
    std::vector<float> want(V), got(V), other(V);
    cpu.forward(prompt, cache, want, false, &draft.set());
    fwd.prefill(0, prompt, got);
    fs.prefill(0, prompt, other);
    EXPECT_LT(rel_error(got.data(), want.data(), V), 2e-2) << "prefill";
    // The 4-bit lm_head is what moved the logits off the shared one's.
    EXPECT_GT(rel_error(got.data(), other.data(), V), 1e-3) << "prefill";
    const int slot = 0;
    for (int s = 0; s < 6; ++s) {
      const std::int32_t t = std::int32_t(std::max_element(want.begin(), want.end()) - want.begin());
      cpu.forward(std::span(&t, 1), cache, want, false, &draft.set());
      fwd.decode(std::span(&slot, 1), std::span(&t, 1), got);
      EXPECT_LT(rel_error(got.data(), want.data(), V), 2e-2) << "step " << s;
    }
  }
}

struct target_run {
  std::vector<std::int32_t> tokens;
  std::vector<float> margin;  // top-2 logit margin before each token
};

// Greedy decoding of the target alone: 16-bit weights, INT8 reads.
target_run target_greedy(const cuda_model& gm, const kv_mode& mode, const std::vector<std::int32_t>& prompt, int n,
                         bool lane_order = false) {
  cuda_forward_options o;
  o.max_context = std::int64_t(prompt.size()) + n + 8;
  o.kv = mode;
  o.packed_lane_order = lane_order;
  cuda_forward fwd(gm, o);
  const std::size_t V = std::size_t(gm.config().vocab_size);
  std::vector<float> logits(V);
  fwd.prefill(0, prompt, logits);
  target_run r;
  const int slot = 0;
  for (int i = 0; i < n; ++i) {
    std::vector<float> sorted(logits);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    r.margin.push_back(sorted[0] - sorted[1]);
    const std::int32_t t = std::int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    r.tokens.push_back(t);
    fwd.decode(std::span(&slot, 1), std::span(&t, 1), logits);
  }
  return r;
}

struct qs_run {
  std::vector<std::int32_t> tokens;
  spec_decode_stats stats;
};

qs_run quantspec_greedy(const cuda_model& gm, std::int64_t group, const std::vector<std::int32_t>& prompt, int n,
                        const gamma_options& g, bool lane_order = false) {
  cuda_forward_options o;
  o.max_context = std::int64_t(prompt.size()) + n + 32;
  o.kv = hier(8, group);
  o.packed_lane_order = lane_order;
  o.max_step_tokens = 16;
  cuda_forward fwd(gm, o);
  sampling_params greedy;
  greedy.temperature = 0;
  cuda_quantspec qs(fwd, greedy, g);
  qs_run r;
  std::int32_t pending = qs.prefill(0, prompt);
  r.tokens.push_back(pending);
  const int slot = 0;
  while (int(r.tokens.size()) < n) {
    const std::int64_t base = fwd.length(0), quantized = fwd.quantized(0);
    const auto rounds = qs.round(std::span(&slot, 1), std::span(&pending, 1));
    const auto& rd = rounds[0];
    // Rollback bookkeeping: the pending token and the kept drafts stay,
    // nothing quantized is ever dropped.
    EXPECT_EQ(fwd.length(0), base + 1 + rd.accepted);
    EXPECT_GE(fwd.quantized(0), quantized);
    EXPECT_EQ(int(rd.tokens.size()), rd.accepted + 1);
    r.tokens.insert(r.tokens.end(), rd.tokens.begin(), rd.tokens.end());
    pending = rd.tokens.back();
  }
  r.tokens.resize(std::size_t(n));
  r.stats = qs.stats();
  return r;
}

void expect_same_greedy(const target_run& ref, const qs_run& got, const std::string& what) {
  SCOPED_TRACE(what);
  for (std::size_t i = 0; i < ref.tokens.size(); ++i)
    if (got.tokens[i] != ref.tokens[i]) {
      EXPECT_LT(ref.margin[i], 0.05f) << "token " << i << " differs (" << got.tokens[i] << " vs " << ref.tokens[i]
                                      << ") where the target's top-2 margin is " << ref.margin[i];
      return;  // the sequences part at a tie; later tokens follow different contexts
    }
}

TEST_F(cuda_quantspec_test, greedy_rounds_equal_the_target_alone_on_a_random_model) {
  const auto c = small_config(8, 2);
  const test::random_weights w(c, 47, 0.12f, dtype::bf16);
  cuda_model gm(c, w.w);
  gm.make_draft(128);
  std::mt19937 rng(11);
  const auto prompt = random_tokens(rng, 150, c.vocab_size);
  for (const std::int64_t group : {std::int64_t(32), std::int64_t(128)}) {
    const auto ref = target_greedy(gm, hier(8, group), prompt, 120);
    for (const char* g : {"1", "4", "7", "auto"}) {
      const auto got = quantspec_greedy(gm, group, prompt, 120, parse_gamma(g));
      expect_same_greedy(ref, got, "G " + std::to_string(group) + " gamma " + g);
      EXPECT_GT(got.stats.drafts, 0);
    }
  }
}

TEST_F(cuda_quantspec_test, greedy_rounds_equal_the_target_alone_on_the_default_model) {
  const model m = model::load(test::default_model_dir());
  cuda_model gm(m.config, m.weights);
  gm.make_draft(128);
  std::string text;
  for (int i = 0; i < 12; ++i) text += "The old man looked out over the sea and said that the boat would come back. ";
  const auto prompt = m.tok.encode(text, m.tok.add_bos_default());
  // G = 32: groups are quantized during the rounds, next to rollbacks. Both
  // orders of the packed cache: lane (packed attention v4, the default) and
  // cpu (v3).
  for (const bool lane : {true, false}) {
    const auto ref = target_greedy(gm, hier(8, 32), prompt, 96, lane);
    for (const char* g : {"1", "5"}) {
      const auto got = quantspec_greedy(gm, 32, prompt, 96, parse_gamma(g), lane);
      expect_same_greedy(ref, got, std::string("default model, ") + (lane ? "lane" : "cpu") + " order, gamma " + g);
      // The trained model's 4-bit draft agrees with it most of the time.
      EXPECT_GT(got.stats.acceptance_rate(), 0.5) << got.stats.summary();
    }
  }
}

TEST_F(cuda_quantspec_test, sampled_rounds_are_reproducible_per_seed) {
  const model m = model::load(test::default_model_dir());
  cuda_model gm(m.config, m.weights);
  gm.make_draft(128);
  const auto prompt = m.tok.encode("The old man looked out over the sea and", m.tok.add_bos_default());
  auto run = [&](std::uint64_t seed) {
    cuda_forward_options o;
    o.max_context = 256;
    o.kv = hier(8, 64);
    o.max_step_tokens = 8;
    cuda_forward fwd(gm, o);
    sampling_params sp;
    sp.temperature = 0.8f;
    sp.seed = seed;
    cuda_quantspec qs(fwd, sp, parse_gamma("4"));
    std::vector<std::int32_t> out{qs.prefill(0, prompt)};
    const int slot = 0;
    while (out.size() < 64) {
      std::int32_t pending = out.back();
      const auto r = qs.round(std::span(&slot, 1), std::span(&pending, 1));
      out.insert(out.end(), r[0].tokens.begin(), r[0].tokens.end());
    }
    for (const auto t : out) EXPECT_TRUE(t >= 0 && t < m.config.vocab_size);
    EXPECT_GT(qs.stats().accepted_tokens, 0) << qs.stats().summary();
    return out;
  };
  EXPECT_EQ(run(5), run(5));
}

TEST_F(cuda_quantspec_test, refuses_what_it_cannot_run) {
  const auto c = small_config(8, 2);
  const test::random_weights w(c, 49, 0.1f, dtype::bf16);
  cuda_model gm(c, w.w);
  cuda_forward_options o;
  o.max_context = 128;
  o.kv = hier(8, 64);
  o.max_step_tokens = 6;
  cuda_forward fwd(gm, o);
  EXPECT_THROW(fwd.set_draft_weights(true), std::logic_error);  // no draft made
  EXPECT_THROW(gm.make_draft(48), std::invalid_argument);          // not a multiple of 32
  gm.make_draft(64);
  EXPECT_THROW(cuda_quantspec(fwd, sampling_params{}, parse_gamma("6")), std::invalid_argument);  // 7 rows > 6
  cuda_quantspec ok(fwd, sampling_params{}, parse_gamma("5"));
  const int slot = 0;
  const std::int32_t toks[] = {1, 2, 3, 4, 5, 6, 7};
  EXPECT_THROW(fwd.extend(std::span(&slot, 1), 7, toks), std::invalid_argument);  // above max_step_tokens
  EXPECT_THROW(fwd.extend(std::span(&slot, 1), 3, std::span(toks, 2)), std::invalid_argument);
  cuda_forward_options f = o;
  f.kv = kv_mode{};
  cuda_forward full(gm, f);
  EXPECT_THROW(cuda_quantspec(full, sampling_params{}, parse_gamma("4")), std::invalid_argument);  // not hier
}

}  // namespace
}  // namespace specpipe
