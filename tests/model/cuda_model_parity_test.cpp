// Whole-model checks of the CUDA backend: cuda_forward (bf16 weights and KV
// cache, f32 math) against cpu_forward (f32 math over the same weights) on a
// random model and on the embedded trained model, and against the
// transformers fixtures of tests/data/hf. Relative error ||gpu - ref|| /
// ||ref|| of the logits <= 2e-2; greedy tokens identical for the first steps.
// Skipped without a device.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "memory/allocator.hpp"
#include "memory/dtype.hpp"
#include "model/cuda_forward.hpp"
#include "model/forward.hpp"
#include "model/model.hpp"
#include "support/gpu_test.hpp"
#include "support/random_weights.hpp"
#include "support/test_paths.hpp"
#include "support/test_util.hpp"

namespace specpipe {
namespace {

using test::rel_error;

constexpr double max_rel_error = 2e-2;
constexpr int greedy_steps_identical = 4;  // prefill's argmax and the next three

std::int32_t argmax(const float* v, std::size_t n) {
  return std::int32_t(std::max_element(v, v + n) - v);
}

class cuda_model_parity : public test::gpu_test {};

// The CPU's greedy continuation: logits after the prompt, then after each of
// `steps` greedy tokens (steps + 1 rows), and those tokens.
struct cpu_run {
  std::vector<std::vector<float>> logits;
  std::vector<std::int32_t> tokens;
};

cpu_run cpu_greedy(const model_config& c, const model_weights& w, const std::vector<std::int32_t>& prompt,
                   int steps) {
  cpu_forward fwd(c, w, 2);
  auto cache = make_full_cache(c, std::int64_t(prompt.size()) + steps + 1, &fwd.pool());
  cpu_run r;
  std::vector<float> logits(std::size_t(c.vocab_size));
  fwd.forward(prompt, *cache, logits);
  for (int s = 0;; ++s) {
    r.logits.push_back(logits);
    r.tokens.push_back(argmax(logits.data(), logits.size()));
    if (s == steps) break;
    const std::int32_t t = r.tokens.back();
    fwd.forward(std::span(&t, 1), *cache, logits);
  }
  return r;
}

// Prefill on the GPU, then decode teacher-forced with the CPU's tokens (so a
// late near-tie cannot derail the comparison), checking every step's logits
// and, for the first steps, the GPU's own greedy choice.
void check_against_cpu(const model_config& c, const model_weights& w, const std::vector<std::int32_t>& prompt,
                       int steps, const cuda_forward_options& base, const std::string& label) {
  SCOPED_TRACE(label);
  const cpu_run ref = cpu_greedy(c, w, prompt, steps);
  cuda_model gm(c, w);
  cuda_forward_options o = base;
  o.max_context = std::int64_t(prompt.size()) + steps + 8;
  cuda_forward fwd(gm, o);
  std::vector<float> logits(std::size_t(c.vocab_size));
  fwd.prefill(0, prompt, logits);
  EXPECT_LE(rel_error(logits.data(), ref.logits[0].data(), logits.size()), max_rel_error) << "prefill";
  std::int32_t pick = -1;
  fwd.select(sampling_params{0.f, 1.f, 0, 0}, 0, std::span(&pick, 1));
  EXPECT_EQ(pick, ref.tokens[0]) << "greedy token after the prompt";
  const int slot = 0;
  for (int s = 1; s <= steps; ++s) {
    const std::int32_t t = ref.tokens[std::size_t(s - 1)];
    fwd.decode(std::span(&slot, 1), std::span(&t, 1), logits);
    EXPECT_LE(rel_error(logits.data(), ref.logits[std::size_t(s)].data(), logits.size()), max_rel_error)
        << "decode step " << s;
    fwd.select(sampling_params{0.f, 1.f, 0, 0}, 0, std::span(&pick, 1));
    if (s < greedy_steps_identical) {
      EXPECT_EQ(pick, ref.tokens[std::size_t(s)]) << "greedy token of step " << s;
    }
  }
}

// Random bf16 weights (the dtype the GPU keeps, so both sides hold the same
// numbers), scaled so that the logits are far from flat.
test::random_weights make_random(const model_config& c, unsigned seed) {
  return test::random_weights(c, seed, 0.1f, dtype::bf16);
}

TEST_F(cuda_model_parity, random_model_matches_cpu_forward) {
  model_config c;
  c.model_type = "llama";
  c.vocab_size = 300;
  c.hidden_size = 256;
  c.intermediate_size = 680;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.max_position_embeddings = 1024;
  c.rope.theta = 10000.0;
  const auto m = make_random(c, 7);
  std::mt19937 rng(11);
  std::vector<std::int32_t> prompt(45);
  for (auto& t : prompt) t = std::int32_t(rng() % std::uint32_t(c.vocab_size));
  // Chunks of 16: three prefill forwards, the later ones attending to earlier
  // chunks; both prefill attention kernels, and the decode GEMM both ways.
  for (const bool tensor_cores : {true, false})
    for (const auto impl : {kernels::cuda::gemm_impl::automatic, kernels::cuda::gemm_impl::cublas}) {
      cuda_forward_options o;
      o.prefill_chunk = 16;
      o.prefill_attention_cublas = tensor_cores;
      o.gemm = impl;
      check_against_cpu(c, m.w, prompt, 16, o,
                        std::string(tensor_cores ? "cuBLAS" : "flash") + " prefill attention, " +
                            (impl == kernels::cuda::gemm_impl::cublas ? "cuBLAS" : "automatic") + " GEMM");
    }
}

TEST_F(cuda_model_parity, default_model_matches_cpu_forward_on_a_real_prompt) {
  const model m = model::load(test::default_model_dir());
  const auto prompt = m.tok.encode("The old man looked out over the sea and said that", m.tok.add_bos_default());
  ASSERT_GE(prompt.size(), 8u);
  cuda_forward_options o;
  o.prefill_chunk = 8;  // several chunks even for this short prompt
  check_against_cpu(m.config, m.weights, prompt, 16, o, "models/default, chunks of 8");
  o.prefill_chunk = 512;
  check_against_cpu(m.config, m.weights, prompt, 4, o, "models/default, one chunk");
}

// transformers' logits for every position of each fixture prompt. The
// fixtures have head_dim 16, which only the prefill path supports (the
// decode kernel needs 64 or 128), so every position is reached by prefilling
// one token at a time, and the whole prompt at once checks the last.
TEST_F(cuda_model_parity, transformers_fixtures_through_prefill) {
  for (const char* name : {"llama3", "mistral", "llama2_sharded"}) {
    SCOPED_TRACE(name);
    const auto dir = test::test_data_dir() / "hf" / name;
    // The fixtures are bare checkpoints (no tokenizer.json): bind them directly.
    struct { model_config config; checkpoint files; model_weights weights; } m{
        load_model_config(dir / "config.json"), checkpoint(dir), {}};
    m.weights = bind_weights(m.files, m.config);
    std::ifstream in(dir / "logits.json");
    ASSERT_TRUE(in) << "cannot open " << (dir / "logits.json").string();
    std::stringstream ss;
    ss << in.rdbuf();
    const auto root = boost::json::parse(ss.str()).as_object();
    const auto& prompts = root.at("prompts").as_array();
    const auto& expected = root.at("logits").as_array();
    cuda_model gm(m.config, m.weights);
    cuda_forward_options o;
    o.max_context = 64;
    o.prefill_chunk = 8;
    cuda_forward fwd(gm, o);
    const auto V = std::size_t(m.config.vocab_size);
    std::vector<float> logits(V), ref(V);
    auto ref_row = [&](std::size_t p, std::size_t t) {
      const auto& row = expected[p].as_array()[t].as_array();
      for (std::size_t i = 0; i < V; ++i) ref[i] = float(row[i].to_number<double>());
    };
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      std::vector<std::int32_t> toks;
      for (const auto& v : prompts[p].as_array()) toks.push_back(std::int32_t(v.to_number<std::int64_t>()));
      fwd.truncate(0, 0);
      fwd.prefill(0, toks, logits);
      ref_row(p, toks.size() - 1);
      EXPECT_LE(rel_error(logits.data(), ref.data(), V), max_rel_error) << "prompt " << p << ", whole";
      fwd.truncate(0, 0);
      for (std::size_t t = 0; t < toks.size(); ++t) {
        fwd.prefill(0, std::span(&toks[t], 1), logits);
        ref_row(p, t);
        EXPECT_LE(rel_error(logits.data(), ref.data(), V), max_rel_error) << "prompt " << p << ", position " << t;
      }
    }
  }
}

}  // namespace
}  // namespace specpipe
