// QuantSpec through the actor pipeline (scheduler -> worker -> store): greedy
// output equals the target's own greedy decoding over the INT8 cache, several
// tokens per step are streamed and cut at max_tokens, the rows sent to the
// store are the accepted positions' target K/V, and the counters arrive in
// the result.
#include <gtest/gtest.h>

#include <mutex>

#include "actors/actor_runtime.hpp"
#include "actors/kv_capture.hpp"
#include "actors/model_sampling.hpp"
#include "actors/pipeline.hpp"
#include "actors/quantspec_step_compute.hpp"
#include "model/forward.hpp"
#include "model/generator.hpp"
#include "model/hier_cache.hpp"
#include "model/safetensors.hpp"
#include "model/tokenizer.hpp"
#include "model/weights.hpp"

namespace specpipe::testing {
namespace {

struct fixture_model {
  model_config config;
  std::unique_ptr<checkpoint> files;
  model_weights weights;
  tokenizer tok;
};

fixture_model load_fixture() {
  const std::string dir = SPECPIPE_TEST_DATA_DIR "/hf/mistral";
  fixture_model m{load_model_config(dir + "/config.json"), std::make_unique<checkpoint>(dir), {},
                  tokenizer::load(SPECPIPE_TEST_DATA_DIR "/tokenizers/spm")};
  m.weights = bind_weights(*m.files, m.config);
  return m;
}

const std::vector<std::int32_t> prompt{1, 17, 42, 99, 200, 7, 31, 5};

// Records the rows of every step on their way out of the wrapped compute.
class recording_compute final : public step_compute {
 public:
  explicit recording_compute(std::shared_ptr<step_compute> inner) : inner_(std::move(inner)) {}
  compute_shape shape() const override { return inner_->shape(); }
  void run(const step_entry& e, step_output& out) override {
    inner_->run(e, out);
    std::lock_guard lock(mutex_);
    rows_.push_back(out.rows);
    tokens_per_step_.push_back(std::int64_t(out.tokens.size()));
  }
  void release(seq_id seq) override { inner_->release(seq); }
  std::int64_t sequences() const override { return inner_->sequences(); }
  std::int64_t cache_bytes() const override { return inner_->cache_bytes(); }

  std::vector<std::shared_ptr<const kv_rows>> rows() const {
    std::lock_guard lock(mutex_);
    return rows_;
  }
  std::vector<std::int64_t> tokens_per_step() const {
    std::lock_guard lock(mutex_);
    return tokens_per_step_;
  }

 private:
  std::shared_ptr<step_compute> inner_;
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<const kv_rows>> rows_;
  std::vector<std::int64_t> tokens_per_step_;
};

// Greedy target-only decoding over the hierarchical INT8 cache, and every
// position's f16 K|V rows as the store would get them.
struct target_run {
  std::vector<std::int32_t> tokens;
  std::vector<std::vector<std::byte>> rows;  // per position
};

target_run target_greedy(const fixture_model& m, int steps, std::int64_t group) {
  cpu_forward fwd(m.config, m.weights, 2);
  capturing_cache cache(std::make_unique<hier_cache>(m.config, 256, hier_options{group, hier_read::int8}),
                        int(m.config.num_hidden_layers), m.config.kv_dim());
  target_run r;
  std::vector<float> logits(std::size_t(m.config.vocab_size));
  auto keep_rows = [&] {
    const auto packed = pack_kv_rows(1, cache, int(m.config.num_hidden_layers), int(m.config.num_key_value_heads),
                                     m.config.head_dim);
    const std::size_t per = packed->data.size() / std::size_t(packed->n_tokens);
    for (std::int64_t t = 0; t < packed->n_tokens; ++t)
      r.rows.emplace_back(packed->data.begin() + std::ptrdiff_t(std::size_t(t) * per),
                          packed->data.begin() + std::ptrdiff_t(std::size_t(t + 1) * per));
  };
  cache.begin_step();
  fwd.forward(prompt, cache, logits);
  keep_rows();
  for (int i = 0; i < steps; ++i) {
    const auto next = std::int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    r.tokens.push_back(next);
    cache.begin_step();
    fwd.forward(std::span<const std::int32_t>(&next, 1), cache, logits);
    keep_rows();
  }
  return r;
}

pipeline_options options(const fixture_model& m, std::int64_t ctx) {
  pipeline_options o;
  o.max_context = ctx;
  o.max_sequences_per_worker = 2;
  o.eos_ids = m.tok.eos_ids();
  o.detokenize = model_detokenizer(m.tok);
  o.make_picker = model_picker_factory();
  return o;
}

quantspec_step_options qs_options(std::int64_t ctx, std::int64_t group, const char* gamma) {
  quantspec_step_options o;
  o.max_context = ctx;
  o.threads = 2;
  o.kv_group = group;
  o.gamma = parse_gamma(gamma);
  return o;
}

generation_request greedy_request(int max_tokens) {
  generation_request req;
  req.prompt = prompt;
  req.max_tokens = max_tokens;
  req.ignore_eos = true;
  req.sampling.temperature = 0;
  return req;
}

TEST(QuantSpecPipeline, GreedyOutputAndStoreRowsAreTheTargets) {
  const fixture_model m = load_fixture();
  const std::int64_t ctx = 128, group = 128;  // no group is quantized: the rows compare bit for bit
  const target_run want = target_greedy(m, 40, group);
  actor_runtime rt;
  auto rec = std::make_shared<recording_compute>(
      make_quantspec_step_compute(m.config, m.weights, qs_options(ctx, group, "4")));
  pipeline p(rt.system(), {rec}, options(m, ctx));
  std::string streamed;
  const auto got = p.generate(1, greedy_request(40), [&](std::string_view d) { streamed += d; });
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.finish_reason, "length");
  EXPECT_FALSE(streamed.empty());  // byte fallback may rewrite earlier bytes: not compared with text
  EXPECT_GT(got.spec.drafts, 0);
  EXPECT_EQ(got.spec.accepted_per_position.size(), 4u);
  EXPECT_GT(got.spec.draft_tokens, got.spec.accepted_tokens - 1);
  // Rows: contiguous positions, each the target's own K|V of that position.
  std::int64_t pos = 0;
  bool multi = false;
  for (const auto& r : rec->rows()) {
    ASSERT_TRUE(r);
    ASSERT_EQ(r->pos0, pos);
    const std::size_t per = r->data.size() / std::size_t(std::max<std::int64_t>(1, r->n_tokens));
    for (std::int64_t t = 0; t < r->n_tokens; ++t, ++pos) {
      ASSERT_LT(std::size_t(pos), want.rows.size());
      const std::vector<std::byte> row(r->data.begin() + std::ptrdiff_t(std::size_t(t) * per),
                                       r->data.begin() + std::ptrdiff_t(std::size_t(t + 1) * per));
      EXPECT_EQ(row, want.rows[std::size_t(pos)]) << "position " << pos;
    }
  }
  for (const auto n : rec->tokens_per_step()) multi = multi || n > 1;
  EXPECT_TRUE(multi) << "no round kept a draft token";
}

TEST(QuantSpecPipeline, FlushesDuringRoundsKeepTheTargetsGreedyOutput) {
  const fixture_model m = load_fixture();
  const std::int64_t ctx = 160, group = 16;  // the 2G buffer fills and flushes many times
  const target_run want = target_greedy(m, 120, group);
  actor_runtime rt;
  pipeline p(rt.system(), {make_quantspec_step_compute(m.config, m.weights, qs_options(ctx, group, "auto"))},
             options(m, ctx));
  const auto got = p.generate(1, greedy_request(120));
  EXPECT_EQ(got.tokens, want.tokens);
}

TEST(QuantSpecPipeline, MaxTokensCutsARoundShort) {
  const fixture_model m = load_fixture();
  const std::int64_t ctx = 64;
  actor_runtime rt;
  pipeline p(rt.system(), {make_quantspec_step_compute(m.config, m.weights, qs_options(ctx, 128, "8"))},
             options(m, ctx));
  const target_run want = target_greedy(m, 20, 128);
  for (const int n : {1, 2, 5, 7, 13}) {
    const auto got = p.generate(std::uint64_t(n), greedy_request(n));
    ASSERT_EQ(got.tokens.size(), std::size_t(n));
    EXPECT_EQ(got.tokens, std::vector<std::int32_t>(want.tokens.begin(), want.tokens.begin() + n));
    EXPECT_EQ(got.finish_reason, "length");
  }
  // The context ends the sequence too: prompt 8 + 30 tokens > 32 positions.
  pipeline small(rt.system(), {make_quantspec_step_compute(m.config, m.weights, qs_options(32, 128, "8"))},
                 options(m, 32));
  const auto got = small.generate(100, greedy_request(30));
  EXPECT_EQ(got.finish_reason, "length");
  EXPECT_EQ(std::int64_t(got.tokens.size()) + std::int64_t(prompt.size()), 32 + 1);
}

TEST(QuantSpecPipeline, SampledRunsAreReproduciblePerSeed) {
  const fixture_model m = load_fixture();
  const std::int64_t ctx = 96;
  actor_runtime rt;
  pipeline p(rt.system(), {make_quantspec_step_compute(m.config, m.weights, qs_options(ctx, 16, "5"))},
             options(m, ctx));
  generation_request req = greedy_request(40);
  req.sampling.temperature = 0.8f;
  req.sampling.top_p = 0.95f;
  req.sampling.seed = 3;
  const auto a = p.generate(1, req);
  const auto b = p.generate(2, req);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.tokens.size(), 40u);
  req.sampling.seed = 4;
  EXPECT_NE(p.generate(3, req).tokens, a.tokens);
}

TEST(KvRowsPrefix, KeepsTheFirstPositions) {
  auto r = std::make_shared<kv_rows>();
  r->n_tokens = 3;
  r->n_layers = 2;
  r->n_kv_heads = 1;
  r->row_bytes = 4;
  r->data.resize(24);
  for (std::size_t i = 0; i < r->data.size(); ++i) r->data[i] = std::byte(i);
  const std::shared_ptr<const kv_rows> all = r;
  EXPECT_EQ(kv_rows_prefix(all, 3), all);  // nothing to drop: the same rows
  const auto two = kv_rows_prefix(all, 2);
  EXPECT_EQ(two->n_tokens, 2);
  ASSERT_EQ(two->data.size(), 16u);
  EXPECT_EQ(two->data[15], std::byte(15));
  EXPECT_EQ(kv_rows_prefix(all, 0)->data.size(), 0u);
}

}  // namespace
}  // namespace specpipe::testing
