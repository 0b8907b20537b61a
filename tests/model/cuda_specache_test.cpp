// SpeCache on the GPU (cuda_forward with specache_fetch,
// model/cuda_specache.cpp) on a random model: with a top-k covering the
// context every packed row is replaced by its 16-bit row from the host
// store, so the real rows' logits must match the full bf16 cache's
// (speculative and output prefetch, prompts through the ring and through
// the staging area, decode across many flushes); with a small top-k the
// fetched rows must bring the logits closer to full than the low-bit cache
// alone; slots of different lengths batched together equal each run alone,
// graphs equal eager launches; the host store and the device buffers match
// their accounting; misuse is refused. Skipped without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "memory/allocator.hpp"
#include "model/cuda_forward.hpp"
#include "model/kv_mode.hpp"
#include "support/gpu_test.hpp"
#include "support/random_weights.hpp"
#include "support/test_util.hpp"

namespace specpipe {
namespace {

using test::rel_error;

std::int32_t argmax(const float* v, std::int64_t n) { return std::int32_t(std::max_element(v, v + n) - v); }

class cuda_specache : public test::gpu_test {};

kv_mode specache_mode(int topk, bool output) {
  kv_mode m = parse_kv_mode("specache", 1, 32, 16);  // G = 32, R = 16: a flush every 32 steps
  set_specache_flags(m, topk, output ? "output" : "speculative");
  return m;
}

std::vector<std::int32_t> random_tokens(std::size_t n, std::uint32_t vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = std::int32_t(rng() % vocab);
  return t;
}

// Logits of the prompt and of `steps` forced tokens on the full bf16 cache.
std::vector<std::vector<float>> full_logits(const cuda_model& gm, const std::vector<std::int32_t>& prompt,
                                            const std::vector<std::int32_t>& forced, std::int64_t capacity) {
  const auto& c = gm.config();
  cuda_forward_options o;
  o.max_context = capacity;
  o.prefill_chunk = 32;
  cuda_forward fwd(gm, o);
  std::vector<std::vector<float>> out;
  std::vector<float> logits(std::size_t(c.vocab_size));
  fwd.prefill(0, prompt, logits);
  out.push_back(logits);
  const int slot = 0;
  for (const std::int32_t t : forced) {
    fwd.decode(std::span(&slot, 1), std::span(&t, 1), logits);
    out.push_back(logits);
  }
  return out;
}

// SpeCache driven as the generate loop drives it, for one slot: a
// predecode seeds the rows, then each step feeds the real token and the
// speculative one (argmax of the previous speculative row). Returns the real
// rows' logits (the prompt's first).
struct spec_run {
  std::vector<std::vector<float>> logits;
  std::int64_t rows_fetched = 0;
};
spec_run run_specache(cuda_forward& fwd, int slot, const std::vector<std::int32_t>& prompt,
                      const std::vector<std::int32_t>& forced, bool output) {
  const auto& c = fwd.config();
  const std::size_t V = std::size_t(c.vocab_size);
  spec_run r;
  std::vector<float> logits(V), two(2 * V);
  fwd.prefill(slot, prompt, logits);
  r.logits.push_back(logits);
  std::int32_t spec = -1;
  for (const std::int32_t t : forced) {
    if (output) {
      fwd.specache_output_step(std::span(&slot, 1), std::span(&t, 1), logits);
      r.logits.push_back(logits);
      continue;
    }
    if (spec < 0) {
      fwd.specache_predecode(std::span(&slot, 1), std::span(&t, 1), logits);
      spec = argmax(logits.data(), c.vocab_size);
    }
    fwd.specache_step(std::span(&slot, 1), std::span(&t, 1), std::span(&spec, 1), two);
    r.logits.emplace_back(two.begin(), two.begin() + std::ptrdiff_t(V));
    spec = argmax(two.data() + V, c.vocab_size);
  }
  r.rows_fetched = fwd.specache_rows_fetched();
  return r;
}

using block_choice = cuda_forward_options::specache_block_choice;

const char* block_name(block_choice b) {
  return b == block_choice::shared ? "shared blocks" : b == block_choice::per_row ? "a block per row" : "automatic blocks";
}

// With top-k covering the context, every row the attention reads is
// exact: the logits are the full cache's (lane_order: the low-bit copy in
// lane order, read by the packed attention v4; blocks: a slot's two rows in
// one attention block or one each).
double check_topk_covering(const model_config& c, bool lane_order, double tol,
                           block_choice blocks = block_choice::automatic) {
  SCOPED_TRACE(std::string(lane_order ? "lane order (v4)" : "cpu order (v3)") + ", " + block_name(blocks));
  double worst = 0;
  const auto m = test::random_weights(c, 17, 0.1f, dtype::bf16);
  cuda_model gm(c, m.w);
  const int steps = 70;  // two flushes past the prompt
  for (const std::size_t prompt_len : {std::size_t(150), std::size_t(9)})
    for (const bool output : {false, true}) {
      SCOPED_TRACE(std::string(output ? "output" : "speculative") + " prefetch, prompt " +
                   std::to_string(prompt_len));
      const auto prompt = random_tokens(prompt_len, std::uint32_t(c.vocab_size), 5);
      const auto forced = random_tokens(std::size_t(steps), std::uint32_t(c.vocab_size), 6);
      const std::int64_t cap = std::int64_t(prompt_len) + steps + 8;
      const auto want = full_logits(gm, prompt, forced, cap);
      cuda_forward_options o;
      o.max_context = cap;
      o.prefill_chunk = 32;
      o.kv = specache_mode(int(cap), output);
      o.specache_fetch = true;
      o.packed_lane_order = lane_order;
      o.specache_blocks = blocks;
      cuda_forward fwd(gm, o);
      const bool lane = c.head_dim == 128 && lane_order;
      EXPECT_EQ(fwd.packed_lane_order(), lane);
      EXPECT_EQ(fwd.specache_shared_blocks(),
                blocks == block_choice::shared || (blocks == block_choice::automatic && lane));
      const auto got = run_specache(fwd, 0, prompt, forced, output);
      if (got.logits.size() != want.size()) {
        ADD_FAILURE() << got.logits.size() << " rows of logits, expected " << want.size();
        return worst;
      }
      EXPECT_GE(fwd.quantized(0), 32) << "the packed part must be exercised";
      int greedy = 0;
      for (std::size_t s = 0; s < want.size(); ++s) {
        // Every attended value is the same bf16 as the full cache's; the
        // packed attention's own rounding (f16 probabilities times the
        // window rows, kernels/cuda/packed_attention.hpp) against
        // flash-decoding's f32 moves these logits by up to ~5e-3 (H200),
        // with nothing quantized yet as much as with everything replaced.
        const double err = rel_error(got.logits[s].data(), want[s].data(), want[s].size());
        EXPECT_LE(err, tol) << "step " << s;
        worst = std::max(worst, err);
        std::vector<float> sorted = want[s];
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
        if (sorted[0] - sorted[1] > 1e-2 * std::fabs(sorted[0])) {
          EXPECT_EQ(argmax(got.logits[s].data(), c.vocab_size), argmax(want[s].data(), c.vocab_size))
              << "greedy token of step " << s;
          ++greedy;
        }
      }
      EXPECT_GE(greedy, steps / 2);
      EXPECT_GT(got.rows_fetched, 0);
      if (!output) {  // every row a real query needs was fetched for it
        cuda_forward_options h = o;
        h.specache_hit_rate = true;
        cuda_forward counted(gm, h);
        const auto again = run_specache(counted, 0, prompt, forced, output);
        EXPECT_EQ(again.logits, got.logits) << "measuring the hit rate changes nothing";
        const auto [needed, hits] = counted.specache_hits();
        EXPECT_GT(needed, 0);
        EXPECT_EQ(hits, needed);
      }
    }
  return worst;
}

TEST_F(cuda_specache, topk_covering_the_context_matches_the_full_cache) {
  check_topk_covering(test::small_gqa_config(), false, 1e-2);
  // head_dim 128 (the lane order applies), both orders. This model's logits
  // move more under the attention's f16 roundings than the head_dim-64 one's
  // (the largest errors are at the prompt's last row, before anything is
  // quantized or fetched); each order's worst step is printed.
  model_config c = test::small_gqa_config();
  c.hidden_size = 512;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 128;
  // Lane order resolves to shared blocks (automatic); a block per row and
  // shared blocks over the cpu order are the other two paths.
  const std::pair<bool, block_choice> runs[] = {
      {false, block_choice::automatic}, {true, block_choice::automatic},
      {true, block_choice::per_row}, {false, block_choice::shared}};
  for (const auto& [lane, blocks] : runs) {
    const double worst = check_topk_covering(c, lane, 2e-2, blocks);
    std::printf("head_dim 128, %s order, %s: worst logits error %.4g\n", lane ? "lane" : "cpu",
                block_name(blocks), worst);
  }
}

TEST_F(cuda_specache, fetched_rows_bring_the_logits_closer_to_full) {
  const auto c = test::small_gqa_config();
  const auto m = test::random_weights(c, 23, 0.1f, dtype::bf16);
  cuda_model gm(c, m.w);
  const int steps = 40;
  const auto prompt = random_tokens(300, std::uint32_t(c.vocab_size), 7);
  const auto forced = random_tokens(std::size_t(steps), std::uint32_t(c.vocab_size), 8);
  const std::int64_t cap = 300 + steps + 8;
  const auto want = full_logits(gm, prompt, forced, cap);
  auto mean_error = [&](const std::vector<std::vector<float>>& got) {
    double sum = 0;
    for (std::size_t s = 1; s < want.size(); ++s) sum += rel_error(got[s].data(), want[s].data(), want[s].size());
    return sum / double(want.size() - 1);
  };
  // The low-bit copy alone: the same cache with nothing fetched.
  cuda_forward_options lo;
  lo.max_context = cap;
  lo.prefill_chunk = 32;
  lo.kv = specache_mode(64, false);
  cuda_forward low(gm, lo);
  std::vector<std::vector<float>> low_logits;
  {
    std::vector<float> logits(std::size_t(c.vocab_size));
    low.prefill(0, prompt, logits);
    low_logits.push_back(logits);
    const int slot = 0;
    for (const std::int32_t t : forced) {
      low.decode(std::span(&slot, 1), std::span(&t, 1), logits);
      low_logits.push_back(logits);
    }
  }
  const double low_err = mean_error(low_logits);
  for (const bool output : {false, true}) {
    SCOPED_TRACE(output ? "output prefetch" : "speculative prefetch");
    cuda_forward_options o = lo;
    o.kv = specache_mode(96, output);  // 96 of ~270 packed rows per head
    o.specache_fetch = true;
    o.specache_hit_rate = !output;
    cuda_forward fwd(gm, o);
    const auto got = run_specache(fwd, 0, prompt, forced, output);
    if (!output) {  // each step's real rows need 96 per layer and head; some were fetched, not all
      const auto [needed, hits] = fwd.specache_hits();
      EXPECT_EQ(needed, std::int64_t(96) * c.num_hidden_layers * c.num_key_value_heads * steps);
      EXPECT_GT(hits, 0);
      EXPECT_LT(hits, needed);
    }
    const double err = mean_error(got.logits);
    EXPECT_LT(err, 0.9 * low_err) << "specache " << err << " against the low-bit cache alone " << low_err;
    // Each step fetches min(k, candidates) rows per layer and KV head (a
    // predecode too, in speculative mode).
    const std::int64_t per_step = 96 * c.num_hidden_layers * c.num_key_value_heads;
    EXPECT_EQ(got.rows_fetched, per_step * (steps + (output ? 0 : 1)));
  }
}

// Three slots of different lengths in one batch (rows to other slots than
// when alone). With a top-k covering the context, each slot's real logits
// equal its run alone up to the attention's split-dependent rounding (the
// f16 probabilities are rounded against each split's running max: ~1e-3);
// rows fetched for the wrong slot would be off by the low-bit error (~0.3).
// With a small top-k, graph replays equal eager launches exactly.
std::vector<std::vector<float>> run_batch(cuda_forward& fwd, const std::vector<std::vector<std::int32_t>>& prompts,
                                          const std::vector<std::int32_t>& forced) {
  const auto& c = fwd.config();
  const std::size_t V = std::size_t(c.vocab_size), b = prompts.size();
  std::vector<int> slots(b);
  for (std::size_t i = 0; i < b; ++i) {
    slots[i] = int(i);
    fwd.prefill(int(i), prompts[i]);
  }
  std::vector<float> logits(b * V), two(2 * b * V);
  std::vector<std::int32_t> toks(b, forced[0]), spec(b);
  fwd.specache_predecode(slots, toks, logits);
  for (std::size_t i = 0; i < b; ++i) spec[i] = argmax(logits.data() + i * V, c.vocab_size);
  std::vector<std::vector<float>> out;  // [step][slot * V]: the real rows
  for (const std::int32_t t : forced) {
    std::fill(toks.begin(), toks.end(), t);
    fwd.specache_step(slots, toks, spec, two);
    std::vector<float> real(b * V);
    for (std::size_t i = 0; i < b; ++i) {
      std::copy(two.begin() + std::ptrdiff_t(2 * i * V), two.begin() + std::ptrdiff_t((2 * i + 1) * V),
                real.begin() + std::ptrdiff_t(i * V));
      spec[i] = argmax(two.data() + (2 * i + 1) * V, c.vocab_size);
    }
    out.push_back(real);
  }
  return out;
}

TEST_F(cuda_specache, batched_slots_equal_each_slot_alone_and_graphs_equal_eager) {
  const auto c = test::small_gqa_config();
  const auto m = test::random_weights(c, 29, 0.1f, dtype::bf16);
  cuda_model gm(c, m.w);
  const int steps = 40;
  const std::vector<std::vector<std::int32_t>> prompts = {random_tokens(150, std::uint32_t(c.vocab_size), 9),
                                                          random_tokens(77, std::uint32_t(c.vocab_size), 10),
                                                          random_tokens(20, std::uint32_t(c.vocab_size), 11)};
  const auto forced = random_tokens(std::size_t(steps), std::uint32_t(c.vocab_size), 12);
  const std::size_t V = std::size_t(c.vocab_size);
  cuda_forward_options o;
  o.max_context = 150 + steps + 8;
  o.prefill_chunk = 32;
  o.kv = specache_mode(int(o.max_context), false);
  o.specache_fetch = true;
  o.max_batch = 3;
  {
    cuda_forward fwd(gm, o);
    const auto together = run_batch(fwd, prompts, forced);
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      cuda_forward one(gm, o);
      const auto alone = run_specache(one, 2, prompts[i], forced, false);
      for (int s = 0; s < steps; ++s) {
        SCOPED_TRACE("slot " + std::to_string(i) + " step " + std::to_string(s));
        EXPECT_LE(rel_error(together[std::size_t(s)].data() + i * V, alone.logits[std::size_t(s + 1)].data(), V),
                  1e-2);
      }
      EXPECT_EQ(fwd.length(int(i)), std::int64_t(prompts[i].size()) + steps);
    }
  }
  o.kv = specache_mode(16, false);
  cuda_forward graphs(gm, o);
  o.use_graphs = false;
  cuda_forward eager(gm, o);
  const auto g = run_batch(graphs, prompts, forced), e = run_batch(eager, prompts, forced);
  for (int s = 0; s < steps; ++s) EXPECT_EQ(g[std::size_t(s)], e[std::size_t(s)]) << "step " << s;
}

TEST_F(cuda_specache, memory_matches_its_accounting_and_misuse_is_refused) {
  const auto c = test::small_gqa_config();
  const auto m = test::random_weights(c, 31, 0.1f, dtype::bf16);
  cuda_model gm(c, m.w);
  cuda_forward_options o;
  o.max_context = 200;
  o.max_batch = 2;
  o.prefill_chunk = 32;
  o.kv = specache_mode(16, false);
  o.specache_fetch = true;
  // [layer][slot][kv head][token][K | V] bf16.
  EXPECT_EQ(cuda_forward::specache_host_bytes(c, o), std::size_t(3 * 2 * 2 * 200 * 64 * 2 * 2));
  cuda_forward_options no_fetch = o;
  no_fetch.specache_fetch = false;
  EXPECT_EQ(cuda_forward::specache_host_bytes(c, no_fetch), 0u);
  EXPECT_EQ(cuda_forward::specache_device_bytes(c, no_fetch), 0u);
  EXPECT_GT(cuda_forward::device_bytes(c, o), cuda_forward::device_bytes(c, no_fetch) +
                                                  cuda_forward::specache_device_bytes(c, o) - 1);
  cuda_forward_options aliased = o;
  aliased.specache_store_tokens = 50;
  EXPECT_EQ(cuda_forward::specache_host_bytes(c, aliased), std::size_t(3 * 2 * 2 * 50 * 64 * 2 * 2));

  cuda_forward fwd(gm, o);
  EXPECT_EQ(fwd.specache_host_bytes(), cuda_forward::specache_host_bytes(c, o));
  const auto prompt = random_tokens(40, std::uint32_t(c.vocab_size), 13);
  fwd.prefill(0, prompt);
  const int slot = 0, other = 1;
  const std::int32_t t = 5;
  EXPECT_THROW(fwd.specache_step(std::span(&slot, 1), std::span(&t, 1), std::span(&t, 1)), std::logic_error)
      << "a step before any predecode has no rows";
  EXPECT_THROW(fwd.specache_predecode(std::span(&other, 1), std::span(&t, 1)), std::invalid_argument)
      << "an empty slot";
  const std::int32_t bad = std::int32_t(c.vocab_size);
  EXPECT_THROW(fwd.specache_predecode(std::span(&slot, 1), std::span(&bad, 1)), std::invalid_argument);
  fwd.specache_predecode(std::span(&slot, 1), std::span(&t, 1));
  EXPECT_EQ(fwd.length(0), 40) << "a predecode keeps no row";
  fwd.specache_step(std::span(&slot, 1), std::span(&t, 1), std::span(&t, 1));
  EXPECT_EQ(fwd.length(0), 41) << "a step keeps the real row only";
  std::vector<std::int32_t> picked(2);
  fwd.select(sampling_params{}, 0, picked, 1, 1);  // the speculative row alone
  EXPECT_THROW(fwd.select(sampling_params{}, 0, picked, 1, 2), std::invalid_argument);
  fwd.truncate(0, 0);
  fwd.prefill(0, prompt);
  EXPECT_THROW(fwd.specache_step(std::span(&slot, 1), std::span(&t, 1), std::span(&t, 1)), std::logic_error)
      << "emptying a slot drops its rows";
  // Plain decode steps still work and keep the store complete.
  fwd.decode(std::span(&slot, 1), std::span(&t, 1));
  EXPECT_EQ(fwd.length(0), 41);

  cuda_forward_options wrong = o;
  wrong.kv = parse_kv_mode("kivi", 1, 32, 16);
  EXPECT_THROW({ cuda_forward f(gm, wrong); }, std::invalid_argument);
  cuda_forward_options no_rows = o;
  no_rows.specache_fetch = false;
  cuda_forward plain(gm, no_rows);
  plain.prefill(0, prompt);
  EXPECT_THROW(plain.specache_predecode(std::span(&slot, 1), std::span(&t, 1)), std::logic_error);
}

}  // namespace
}  // namespace specpipe
