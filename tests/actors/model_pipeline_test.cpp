// The actor pipeline over the real CPU forward pass: it must print what the
// direct decode loop (model/generator.cpp) prints, and what it costs per step
// is reported. Uses the small Mistral fixture checkpoint.
#include <gtest/gtest.h>

// The CPU forward pass arrives with the kernels room; until it is in the
// tree these tests skip (the rest of the room does not need it).
#if __has_include("model/full_cache.hpp")
#define SPECPIPE_HAVE_CPU_FORWARD 1
#endif

#ifdef SPECPIPE_HAVE_CPU_FORWARD
#include <iostream>

#include <caf/scoped_actor.hpp>

#include "actors/actor_overhead.hpp"
#include "actors/actor_runtime.hpp"
#include "actors/cpu_step_compute.hpp"
#include "actors/model_sampling.hpp"
#include "actors/pipeline.hpp"
#include "model/forward.hpp"
#include "model/generator.hpp"
#include "model/model.hpp"
#endif

namespace specpipe::testing {
namespace {

#ifdef SPECPIPE_HAVE_CPU_FORWARD

const char* fixture() { return SPECPIPE_TEST_DATA_DIR "/hf/mistral"; }

generation_result direct(const model& m, const generation_request& req, std::int64_t ctx) {
  cpu_forward fwd(m.config, m.weights, 2);
  auto cache = make_full_cache(m.config, ctx, &fwd.pool());
  return generate(fwd, *cache, m.tok, m.tok.eos_ids(), req, ctx);
}

pipeline_options model_options(const model& m, std::int64_t ctx) {
  pipeline_options o;
  o.max_context = ctx;
  o.max_sequences_per_worker = 4;
  o.eos_ids = m.tok.eos_ids();
  o.detokenize = model_detokenizer(m.tok);
  o.make_picker = model_picker_factory();
  return o;
}

TEST(ModelPipeline, GreedyAndSampledOutputEqualsTheDirectLoop) {
  const model m = model::load(fixture());
  const std::int64_t ctx = 96;
  actor_runtime rt;
  pipeline p(rt.system(), {make_cpu_step_compute(m.config, m.weights, {ctx, 2})}, model_options(m, ctx));
  std::uint64_t id = 1;
  for (const float temperature : {0.0f, 0.9f}) {
    generation_request req;
    req.prompt = m.tok.encode("The quick brown fox", true);
    req.max_tokens = 24;
    req.ignore_eos = true;
    req.sampling.temperature = temperature;
    req.sampling.seed = 11;
    const auto want = direct(m, req, ctx);
    std::string streamed;
    const auto got = p.generate(id++, req, [&](std::string_view d) { streamed += d; });
    EXPECT_EQ(got.tokens, want.tokens) << "temperature " << temperature;
    EXPECT_EQ(got.text, want.text);
    EXPECT_EQ(streamed, want.text);
    EXPECT_EQ(got.finish_reason, want.finish_reason);
    EXPECT_EQ(got.decode_forwards, want.decode_forwards);
  }
}

TEST(ModelPipeline, ConcurrentSequencesEachMatchTheirDirectRun) {
  const model m = model::load(fixture());
  const std::int64_t ctx = 64;
  actor_runtime rt;
  std::vector<std::shared_ptr<step_compute>> workers{make_cpu_step_compute(m.config, m.weights, {ctx, 1}),
                                                     make_cpu_step_compute(m.config, m.weights, {ctx, 1})};
  pipeline p(rt.system(), workers, model_options(m, ctx));
  std::vector<generation_request> reqs(3);
  const char* prompts[] = {"Once upon", "a time there", "lived a cat"};
  for (int i = 0; i < 3; ++i) {
    reqs[std::size_t(i)].prompt = m.tok.encode(prompts[i], true);
    reqs[std::size_t(i)].max_tokens = 10;
    reqs[std::size_t(i)].ignore_eos = true;
    reqs[std::size_t(i)].sampling.temperature = 0;
  }
  caf::scoped_actor self{rt.system()};
  for (int i = 0; i < 3; ++i)
    self->send(caf::actor_cast<caf::actor>(p.scheduler()), generate_atom_v, std::uint64_t(i + 1), reqs[std::size_t(i)],
               caf::actor{});
  std::vector<generation_result> got;
  int n = 0;
  self->receive_for(n, 3)([&](generation_result& r) { got.push_back(r); },
                          [&](caf::error& e) { ADD_FAILURE() << describe(e); },
                          caf::after(std::chrono::seconds(60)) >> [] { FAIL() << "timed out"; });
  ASSERT_EQ(got.size(), 3u);
  // Replies come in completion order: match each to a direct run by its prompt length and text.
  int matched = 0;
  for (const auto& r : reqs) {
    const auto want = direct(m, r, ctx);
    for (const auto& g : got)
      if (g.tokens == want.tokens && g.prompt_tokens == std::int64_t(r.prompt.size())) {
        ++matched;
        break;
      }
  }
  EXPECT_EQ(matched, 3);
}

TEST(ModelPipeline, ReportsTheActorOverheadPerDecodeStep) {
  const model m = model::load(fixture());
  const auto r = measure_actor_overhead(m.config, m.weights, m.tok.encode("It was a dark and stormy night", true), 48, 2);
  print_actor_overhead(std::cout, r);
  EXPECT_TRUE(r.same_tokens);
  EXPECT_EQ(r.decode_steps, 47);
}

#else

TEST(ModelPipeline, NeedsTheCpuForwardPass) {
  GTEST_SKIP() << "the CPU forward pass (model/forward.cpp, model/full_cache.hpp) is not in this tree yet";
}

#endif

}  // namespace
}  // namespace specpipe::testing
