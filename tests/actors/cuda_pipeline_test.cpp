// The actor pipeline over the GPU: workers whose compute is cuda_forward
// (actors/cuda_step_compute.hpp) on the embedded default model. A request
// through the pipeline decodes what a direct cuda_forward loop decodes;
// concurrent requests share batched decode steps and still decode what each
// decodes alone; a worker out of cache slots fails that request only; two
// GPU workers run side by side; finished sequences leave no cache behind;
// QuantSpec's rounds and SpeCache's steps through the pipeline decode what
// their direct loops decode. Skips without a CUDA device (the option checks run anywhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "actors/actor_runtime.hpp"
#include "actors/cuda_quantspec_step_compute.hpp"
#include "actors/cuda_specache_step_compute.hpp"
#include "actors/cuda_step_compute.hpp"
#include "actors/pipeline.hpp"
#include "actors/pipeline_error.hpp"
#include "memory/allocator.hpp"
#include "model/cuda_forward.hpp"
#include "model/cuda_quantspec.hpp"
#include "model/cuda_specache_backend.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"
#include "support/gpu_test.hpp"
#include "support/test_paths.hpp"

namespace specpipe::testing {
namespace {

using namespace std::chrono_literals;

struct default_model {
  model_config config;
  std::unique_ptr<checkpoint> files;
  model_weights weights;
};

const default_model& model_once() {
  static const default_model m = [] {
    const auto dir = test::default_model_dir().string();
    default_model d{load_model_config(dir + "/config.json"), std::make_unique<checkpoint>(dir), {}};
    d.weights = bind_weights(*d.files, d.config);
    return d;
  }();
  return m;
}

constexpr std::int64_t context = 512;

pipeline_options options_of(int per_worker) {
  pipeline_options o;
  o.max_context = context;
  o.max_sequences_per_worker = per_worker;
  o.step_timeout = 60s;
  o.detokenize = [](std::span<const std::int32_t> ids) { return std::string(ids.size(), 'x'); };
  o.make_picker = [](const sampling_params&) {
    return [](std::span<const float> logits) {
      return std::int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    };
  };
  return o;
}

std::shared_ptr<step_compute> gpu_compute(int slots, kv_mode kv = {}, int device = 0) {
  cuda_step_options o;
  o.device = device;
  o.max_context = context;
  o.max_sequences = slots;
  o.kv = kv;
  return make_cuda_step_compute(model_once().config, model_once().weights, o);
}

std::vector<std::int32_t> prompt_of(int i) {
  std::vector<std::int32_t> p{4088};
  for (int t = 0; t < 20 + 7 * i; ++t) p.push_back(std::int32_t((97 * t + 31 * i + 11) % 4000));
  return p;
}

generation_request request_of(int i, int max_tokens) {
  generation_request r;
  r.prompt = prompt_of(i);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  return r;
}

// A direct cuda_forward loop (batch 1, logits to the host) over request i:
// greedy when `forced` is empty, else teacher-forcing `forced`. Per step it
// keeps the token taken and how far that token's logit lies below the
// step's largest (0 where it is the argmax).
struct replay {
  std::vector<std::int32_t> tokens;
  std::vector<float> gaps;
};

replay direct_loop(int i, std::size_t n, const std::vector<std::int32_t>& forced = {}, kv_mode kv = {}) {
  const auto& m = model_once();
  cuda_model gpu(m.config, m.weights, 0);
  cuda_forward_options o;
  o.max_context = context;
  o.kv = kv;
  cuda_forward fwd(gpu, o);
  std::vector<float> logits(std::size_t(m.config.vocab_size));
  fwd.prefill(0, prompt_of(i), logits);
  replay r;
  const int one[1] = {0};
  for (std::size_t k = 0; k < n; ++k) {
    const auto top = std::max_element(logits.begin(), logits.end());
    const std::int32_t tok = forced.empty() ? std::int32_t(top - logits.begin()) : forced[k];
    r.tokens.push_back(tok);
    r.gaps.push_back(*top - logits[std::size_t(tok)]);
    const std::int32_t in[1] = {tok};
    if (k + 1 < n) fwd.decode(one, in, logits);
  }
  return r;
}

std::vector<std::int32_t> direct(int i, int n) { return direct_loop(i, std::size_t(n)).tokens; }

// A batched decode sums in another order than batch 1 (its attention splits
// differ), so where two logits nearly tie it may pick the other one; an
// entry given another sequence's output would lie far below the argmax.
std::vector<float> margins(int i, const std::vector<std::int32_t>& tokens, kv_mode kv) {
  return direct_loop(i, tokens.size(), tokens, kv).gaps;
}

struct outcome {
  bool ok = false;
  generation_result result;
  std::string error;
};

// Runs requests 0 .. n-1 at once (one thread each); outcomes by request.
std::vector<outcome> run_all(pipeline& p, int n, int max_tokens) {
  std::vector<outcome> out(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&p, &out, i, max_tokens] {
      try {
        out[std::size_t(i)] = {true, p.generate(std::uint64_t(i + 1), request_of(i, max_tokens), {}, 120s), ""};
      } catch (const std::exception& e) {
        out[std::size_t(i)] = {false, {}, e.what()};
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

void wait_until_empty(pipeline& p, std::size_t worker) {
  for (int i = 0; i < 200 && p.usage_of(worker).sequences != 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(p.usage_of(worker).sequences, 0);
  EXPECT_EQ(p.usage_of(worker).cache_bytes, 0);
}

class CudaPipeline : public test::gpu_test {};

TEST_F(CudaPipeline, OneRequestDecodesWhatTheDirectLoopDecodes) {
  const auto want = direct(0, 24);
  actor_runtime rt;
  pipeline p(rt.system(), {gpu_compute(1)}, options_of(1));
  const auto r = p.generate(1, request_of(0, 24), {}, 120s);
  EXPECT_EQ(r.tokens, want);
  wait_until_empty(p, 0);
}

TEST_F(CudaPipeline, ConcurrentRequestsShareBatchedStepsAndDecodeWhatEachDoesAlone) {
  constexpr int n = 4, tokens = 32;
  for (const char* mode : {"full", "kivi"}) {
    SCOPED_TRACE(mode);
    const kv_mode kv = std::string(mode) == "full" ? kv_mode{} : parse_kv_mode("kivi", 4, 32, 32);
    actor_runtime rt;
    pipeline p(rt.system(), {gpu_compute(n, kv)}, options_of(n));
    const auto out = run_all(p, n, tokens);
    for (int i = 0; i < n; ++i) {
      const auto& o = out[std::size_t(i)];
      ASSERT_TRUE(o.ok) << o.error;
      ASSERT_EQ(o.result.tokens.size(), std::size_t(tokens));
      // Each batched pick is the batch-1 argmax, or within bf16 reordering
      // noise of it (a near tie).
      const auto gap = margins(i, o.result.tokens, kv);
      int exact = 0;
      for (std::size_t k = 0; k < gap.size(); ++k) {
        EXPECT_LE(gap[k], 0.05f) << "request " << i << ", token " << k;
        exact += gap[k] == 0.0f;
      }
      EXPECT_GE(exact, tokens - 3) << "request " << i;
    }
    EXPECT_GE(p.stats().decode_steps, 1);
    EXPECT_LT(p.stats().decode_steps, std::int64_t(n) * (tokens - 1)) << "no decode step held several sequences";
    wait_until_empty(p, 0);
  }
}

TEST_F(CudaPipeline, AWorkerOutOfSlotsFailsThatRequestOnly) {
  actor_runtime rt;
  // The scheduler may give the worker two sequences; its compute has one slot.
  pipeline p(rt.system(), {gpu_compute(1)}, options_of(2));
  const auto out = run_all(p, 2, 16);
  int failed = 0;
  for (const auto& o : out) {
    if (o.ok) {
      EXPECT_EQ(o.result.tokens.size(), 16u);
      continue;
    }
    ++failed;
    EXPECT_NE(o.error.find("sequence slots of this GPU worker are in use"), std::string::npos) << o.error;
  }
  EXPECT_EQ(failed, 1);
  wait_until_empty(p, 0);
}

// Two one-slot workers serve requests 0 and 1 at once, and each decodes what
// the direct loop (GPU 0) decodes.
void expect_two_workers_decode_alone(std::shared_ptr<step_compute> a, std::shared_ptr<step_compute> b) {
  const auto want0 = direct(0, 16), want1 = direct(1, 16);
  actor_runtime rt;
  pipeline p(rt.system(), {std::move(a), std::move(b)}, options_of(1));
  const auto out = run_all(p, 2, 16);
  ASSERT_TRUE(out[0].ok) << out[0].error;
  ASSERT_TRUE(out[1].ok) << out[1].error;
  EXPECT_EQ(out[0].result.tokens, want0);
  EXPECT_EQ(out[1].result.tokens, want1);
  wait_until_empty(p, 0);
  wait_until_empty(p, 1);
}

TEST_F(CudaPipeline, TwoGpuWorkersServeAtOnce) { expect_two_workers_decode_alone(gpu_compute(1), gpu_compute(1)); }

cuda_quantspec_step_options quantspec_options(int slots) {
  cuda_quantspec_step_options o;
  o.max_context = context;
  o.max_sequences = slots;
  o.kv_group = 32;
  o.gamma.gamma = 4;
  return o;
}

// cuda_quantspec's rounds driven directly on slot 0, greedy, until n tokens.
std::vector<std::int32_t> direct_quantspec(int i, std::size_t n) {
  const auto& m = model_once();
  const auto qo = quantspec_options(1);
  cuda_model gpu(m.config, m.weights, 0);
  gpu.make_draft(qo.draft.group);
  cuda_forward_options o;
  o.max_context = context;
  o.kv = parse_kv_mode("hier", 8, qo.kv_group, 0);
  o.kv_max_append = 16;
  o.max_step_tokens = qo.gamma.gamma + 1;
  cuda_forward fwd(gpu, o);
  sampling_params greedy;
  greedy.temperature = 0;
  cuda_quantspec qs(fwd, greedy, qo.gamma);
  std::vector<std::int32_t> out{qs.prefill(0, prompt_of(i))};
  const int slot = 0;
  while (out.size() < n) {
    const std::int32_t pending = out.back();
    const auto r = qs.round({&slot, 1}, {&pending, 1}).front();
    out.insert(out.end(), r.tokens.begin(), r.tokens.end());
  }
  out.resize(n);
  return out;
}

TEST_F(CudaPipeline, QuantSpecRoundsDecodeWhatTheDirectRoundsDecode) {
  constexpr int tokens = 40;
  const auto want0 = direct_quantspec(0, tokens), want1 = direct_quantspec(1, tokens);
  actor_runtime rt;
  const auto& m = model_once();
  pipeline p(rt.system(), {make_cuda_quantspec_step_compute(m.config, m.weights, quantspec_options(2))}, options_of(2));
  const auto out = run_all(p, 2, tokens);
  ASSERT_TRUE(out[0].ok) << out[0].error;
  ASSERT_TRUE(out[1].ok) << out[1].error;
  EXPECT_EQ(out[0].result.tokens, want0);
  EXPECT_EQ(out[1].result.tokens, want1);
  for (const auto& o : out) {
    EXPECT_GT(o.result.spec.drafts, 0);
    EXPECT_GT(o.result.spec.draft_tokens, 0);
    EXPECT_LE(o.result.spec.accepted_tokens, o.result.spec.draft_tokens);
  }
  wait_until_empty(p, 0);
}

kv_mode specache_mode(const char* prefetch) {
  kv_mode kv = parse_kv_mode("specache", 1, 32, 32);
  kv.topk = 8;
  kv.prefetch = std::string(prefetch) == "output" ? specache_prefetch::output : specache_prefetch::speculative;
  return kv;
}

// cuda_specache_backend on slot 0 of its own forward, greedy, n tokens.
std::vector<std::int32_t> direct_specache(int i, std::size_t n, const kv_mode& kv) {
  const auto& m = model_once();
  cuda_model gpu(m.config, m.weights, 0);
  cuda_forward_options o;
  o.max_context = context;
  o.kv = kv;
  o.specache_fetch = true;
  o.specache_hit_rate = kv.prefetch == specache_prefetch::speculative;
  cuda_forward fwd(gpu, o);
  sampling_params greedy;
  greedy.temperature = 0;
  cuda_specache_backend b(fwd, 0, greedy, kv.prefetch);
  b.prefill(prompt_of(i));
  std::vector<std::int32_t> out{b.pick(0)};
  while (out.size() < n) {
    b.step(out.back());
    out.push_back(b.pick(std::int64_t(out.size())));
  }
  return out;
}

std::shared_ptr<step_compute> specache_compute(int slots, const kv_mode& kv) {
  cuda_specache_step_options o;
  o.max_context = context;
  o.max_sequences = slots;
  o.kv = kv;
  return make_cuda_specache_step_compute(model_once().config, model_once().weights, o);
}

// One request decodes what the direct backend decodes (the same forwards at
// batch 1); two at once share batched two-row steps, each seeded by its own
// predecode, and report what they fetched.
TEST_F(CudaPipeline, SpeCacheStepsDecodeWhatTheDirectStepsDecode) {
  constexpr int tokens = 60;  // past a few group flushes of 32
  for (const char* prefetch : {"speculative", "output"}) {
    SCOPED_TRACE(prefetch);
    const kv_mode kv = specache_mode(prefetch);
    actor_runtime rt;
    {
      pipeline p(rt.system(), {specache_compute(1, kv)}, options_of(1));
      const auto r = p.generate(1, request_of(0, tokens), {}, 120s);
      EXPECT_EQ(r.tokens, direct_specache(0, tokens, kv));
      wait_until_empty(p, 0);
    }
    pipeline p(rt.system(), {specache_compute(2, kv)}, options_of(2));
    const auto out = run_all(p, 2, tokens);
    for (const auto& o : out) {
      ASSERT_TRUE(o.ok) << o.error;
      EXPECT_EQ(o.result.tokens.size(), std::size_t(tokens));
    }
    const auto& s = p.stats().specache;
    EXPECT_EQ(s.steps, 2 * (tokens - 1));
    EXPECT_GT(s.rows_fetched, 0);
    if (kv.prefetch == specache_prefetch::speculative) {
      EXPECT_GT(s.guesses, 0);
      EXPECT_GT(s.needed, 0);
    }
    EXPECT_LT(p.stats().decode_steps, 2 * (tokens - 1)) << "no step held both sequences";
    wait_until_empty(p, 0);
  }
}

// Host-side option checks: no device needed, nothing allocated.
TEST(CudaQuantSpecStepCompute, RefusesWhatTheGpuRoundsCannotRun) {
  const auto& m = model_once();
  auto expect_refused = [&](cuda_quantspec_step_options o, const std::string& needle) {
    try {
      make_cuda_quantspec_step_compute(m.config, m.weights, o);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto o = quantspec_options(1);
  o.kv_group = 256;
  expect_refused(o, "--group");
  o = quantspec_options(1);
  o.gamma.gamma = 16;
  expect_refused(o, "--gamma 16");
  o = quantspec_options(1);
  o.max_context = 0;
  expect_refused(o, "max_context");
}

// One worker per GPU: each binds its own device at every step, and both
// decode what the direct loop on GPU 0 decodes (the same kernels on the same
// card model).
TEST_F(CudaPipeline, WorkersOnTwoGpusServeAtOnce) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two CUDA devices, " << cuda_device_count() << " visible";
  expect_two_workers_decode_alone(gpu_compute(1, {}, 0), gpu_compute(1, {}, 1));
}

TEST(CudaStepCompute, SpeCacheIsRefusedWithTheReason) {
  kv_mode kv = parse_kv_mode("specache", 1, 64, 64);
  cuda_step_options o;
  o.max_context = context;
  o.kv = kv;
  try {
    make_cuda_step_compute(model_once().config, model_once().weights, o);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("specache"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace specpipe::testing
