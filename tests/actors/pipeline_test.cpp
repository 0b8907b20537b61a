// The actor pipeline end to end on the fake compute: streaming, two workers
// at once, cancellation, store exhaustion, worker failures, transfer ordering
// and the trace. Every blocking wait has a timeout, so a hang fails the test.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actors/actor_runtime.hpp"
#include "actors/pipeline.hpp"
#include "actors/pipeline_error.hpp"
#include "fake_compute.hpp"
#include "fake_pipeline.hpp"

namespace specpipe::testing {
namespace {

using namespace std::chrono_literals;

std::vector<std::shared_ptr<step_compute>> fakes(int n, fake_compute::options o, std::shared_ptr<fake_counters> c) {
  std::vector<std::shared_ptr<step_compute>> v;
  for (int i = 0; i < n; ++i) v.push_back(std::make_shared<fake_compute>(o, c));
  return v;
}

struct outcome {
  bool ok = false;
  generation_result result;
  std::string error;
};

// Sends several requests at once and collects every outcome.
std::vector<outcome> run_all(caf::actor_system& sys, const pipeline& p, const std::vector<generation_request>& reqs,
                             std::chrono::milliseconds timeout = 20s) {
  caf::scoped_actor self{sys};
  std::vector<outcome> out(reqs.size());
  for (std::size_t i = 0; i < reqs.size(); ++i)
    self->request(p.scheduler(), timeout, generate_atom_v, std::uint64_t(i + 1), reqs[i], caf::actor{})
        .receive([&](generation_result& r) { out[i] = {true, std::move(r), ""}; },
                 [&](caf::error& e) { out[i] = {false, {}, describe(e)}; });
  return out;
}

TEST(Pipeline, StreamsTokensAndTextLikeTheDirectLoop) {
  actor_runtime rt;
  auto counters = std::make_shared<fake_counters>();
  pipeline p(rt.system(), fakes(1, {}, counters), fake_options());
  std::string streamed;
  const auto r = p.generate(1, request_of({1, 2, 3}, 5), [&](std::string_view d) { streamed += d; }, 10s);
  EXPECT_EQ(r.tokens, (std::vector<std::int32_t>{4, 5, 6, 7, 8}));
  EXPECT_EQ(r.text, "efghi");
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.prompt_tokens, 3);
  EXPECT_EQ(r.decode_forwards, 4);
  // Every decode but the first was queued behind the step before it (the
  // worker picked the token): no step waited for a message. The prefill's
  // look-ahead is the first decode; none goes past the last token.
  EXPECT_EQ(p.stats().steps_queued_ahead, 4);
  EXPECT_EQ(p.stats().steps, 5);
  // The sequence's rows went to the host store and came back out at the end.
  const auto u = p.store_usage();
  EXPECT_EQ(u.sequences, 0);
  EXPECT_EQ(u.bytes_used, 0);
}

TEST(Pipeline, EosAndStopStringsEndTheSequence) {
  actor_runtime rt;
  auto o = fake_options();
  o.eos_ids = {6};
  pipeline p(rt.system(), fakes(1, {}, std::make_shared<fake_counters>()), o);
  const auto eos = p.generate(1, request_of({3}, 10));
  EXPECT_EQ(eos.tokens, (std::vector<std::int32_t>{4, 5}));
  EXPECT_EQ(eos.finish_reason, "stop");
  auto req = request_of({10}, 10);
  req.stop = {"mn"};  // 11 -> 'l', 12 -> 'm', 13 -> 'n'
  std::string streamed;
  const auto stop = p.generate(2, req, [&](std::string_view d) { streamed += d; });
  EXPECT_EQ(stop.text, "l");
  EXPECT_EQ(streamed, "l");
  EXPECT_EQ(stop.finish_reason, "stop");
  // Request 1 ended on EOS with a step possibly still queued behind it: its
  // id is not handed to a new request, whose replies could mix with the old.
  try {
    p.generate(1, request_of({3}, 2));
    FAIL() << "a used id was accepted again";
  } catch (const pipeline_failure& e) {
    EXPECT_NE(std::string(e.what()).find("earlier request"), std::string::npos) << e.what();
  }
  EXPECT_EQ(p.generate(3, request_of({3}, 2)).tokens.size(), 2u);
}

TEST(Pipeline, InvalidRequestsAreRefusedWithTheField) {
  actor_runtime rt;
  pipeline p(rt.system(), fakes(1, {}, std::make_shared<fake_counters>()), fake_options());
  try {
    p.generate(1, request_of({}, 3));
    FAIL() << "empty prompt accepted";
  } catch (const pipeline_failure& e) {
    EXPECT_NE(std::string(e.what()).find("prompt"), std::string::npos) << e.what();
  }
  try {
    p.generate(2, request_of({fake_vocab + 5}, 3));
    FAIL() << "out-of-vocabulary token accepted";
  } catch (const pipeline_failure& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
}

TEST(Pipeline, TwoWorkersServeDifferentSequencesAtOnce) {
  actor_runtime rt;
  auto counters = std::make_shared<fake_counters>();
  fake_compute::options fo;
  fo.delay = 15ms;
  fo.rendezvous = 2;  // each worker's first step waits for the other's
  pipeline p(rt.system(), fakes(2, fo, counters), fake_options());
  caf::scoped_actor self{rt.system()};
  // Both requests are in flight before either finishes.
  std::vector<outcome> out(2);
  for (int i = 0; i < 2; ++i)
    self->send(caf::actor_cast<caf::actor>(p.scheduler()), generate_atom_v, std::uint64_t(i + 1),
               request_of({i * 10 + 1}, 6), caf::actor{});
  int got = 0;
  self->receive_for(got, 2)(
      [&](generation_result& r) { out[std::size_t(got)] = {true, std::move(r), ""}; },
      [&](caf::error& e) { out[std::size_t(got)] = {false, {}, describe(e)}; },
      caf::after(20s) >> [&] { FAIL() << "timed out"; });
  for (const auto& o : out) EXPECT_TRUE(o.ok) << o.error;
  EXPECT_EQ(counters->max_active.load(), 2) << "the two workers never ran at the same time";
  // Frees follow the answers asynchronously: poll briefly.
  std::int64_t left = -1;
  for (int i = 0; i < 100 && (left = p.usage_of(0).sequences + p.usage_of(1).sequences) != 0; ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(left, 0);
}

TEST(Pipeline, CancellationFreesHostStoreAndCache) {
  actor_runtime rt;
  fake_compute::options fo;
  fo.delay = 5ms;
  pipeline p(rt.system(), fakes(1, fo, std::make_shared<fake_counters>()), fake_options());
  caf::scoped_actor self{rt.system()};
  self->send(caf::actor_cast<caf::actor>(p.scheduler()), generate_atom_v, std::uint64_t(7),
             request_of({1, 2, 3, 4, 5, 6, 7, 8}, 200), caf::actor_cast<caf::actor>(self));
  // Wait until it streams, so it is mid-generation with rows in the store.
  int deltas = 0;
  self->receive_for(deltas, 5)([](delta_atom, std::uint64_t, std::int32_t, const std::string&) {},
                               caf::after(10s) >> [] { FAIL() << "no tokens streamed"; });
  EXPECT_GT(p.store_usage().bytes_used, 0);
  bool cancelled = false;
  self->request(p.scheduler(), 5s, cancel_atom_v, std::uint64_t(7))
      .receive([&](bool b) { cancelled = b; }, [](caf::error& e) { FAIL() << describe(e); });
  EXPECT_TRUE(cancelled);
  // The generate request's own answer is the cancellation error.
  bool saw_error = false;
  self->receive_while([&] { return !saw_error; })(
      [](delta_atom, std::uint64_t, std::int32_t, const std::string&) {},
      [&](generation_result&) { FAIL() << "a cancelled request completed"; },
      [&](caf::error& e) {
        EXPECT_NE(describe(e).find("cancelled"), std::string::npos) << describe(e);
        saw_error = true;
      },
      caf::after(10s) >> [&] { FAIL() << "no answer after cancel"; saw_error = true; });
  // Frees are asynchronous: poll briefly.
  kv_usage u;
  worker_usage w;
  for (int i = 0; i < 100; ++i) {
    u = p.store_usage();
    w = p.usage_of(0);
    if (u.bytes_used == 0 && w.sequences == 0) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(u.bytes_used, 0);
  EXPECT_EQ(u.sequences, 0);
  EXPECT_EQ(w.sequences, 0);
  EXPECT_EQ(w.cache_bytes, 0);
}

TEST(Pipeline, StoreExhaustionFailsOnlyThatRequest) {
  actor_runtime rt;
  auto o = fake_options();
  // A block is 4 tokens x 16-byte rows; a token takes a row in each of the
  // 2 layers x 2 heads = 4 streams, so 16 blocks hold 16 tokens in all: the
  // 40-token prompt cannot fit, the 2-token one with its 4 new tokens can.
  o.store_budget_bytes = 16 * 4 * 16;
  pipeline p(rt.system(), fakes(1, {}, std::make_shared<fake_counters>()), o);
  std::vector<generation_request> reqs{request_of(std::vector<std::int32_t>(40, 1), 3), request_of({2, 3}, 4)};
  const auto out = run_all(rt.system(), p, reqs);
  ASSERT_FALSE(out[0].ok);
  EXPECT_NE(out[0].error.find("store_exhausted"), std::string::npos) << out[0].error;
  EXPECT_NE(out[0].error.find("request 1"), std::string::npos) << out[0].error;
  EXPECT_NE(out[0].error.find("budget"), std::string::npos) << out[0].error;
  ASSERT_TRUE(out[1].ok) << out[1].error;
  EXPECT_EQ(out[1].result.tokens.size(), 4u);
}

TEST(Pipeline, AdmissionReservesTheWholeGenerationAndReleasesItAtTheEnd) {
  actor_runtime rt;
  auto o = fake_options();
  // 16 blocks of 4 tokens over 4 streams: request 1 (2 + 10 tokens) reserves
  // 12 of them at admission, so request 2 (2 + 6 tokens, 8 blocks) cannot be
  // admitted beside it, though its prompt alone would fit what is free.
  o.store_budget_bytes = 16 * 4 * 16;
  fake_compute::options fo;
  fo.delay = 10ms;
  pipeline p(rt.system(), fakes(1, fo, std::make_shared<fake_counters>()), o);
  caf::scoped_actor self{rt.system()};
  self->send(caf::actor_cast<caf::actor>(p.scheduler()), generate_atom_v, std::uint64_t(1), request_of({1, 2}, 10),
             caf::actor_cast<caf::actor>(self));
  // Once request 1 streams, its reservation is in place.
  self->receive([](delta_atom, std::uint64_t, std::int32_t, const std::string&) {},
                caf::after(10s) >> [] { FAIL() << "no tokens streamed"; });
  const auto mid = p.store_usage();
  EXPECT_EQ(mid.blocks_used, 12);
  EXPECT_GT(mid.blocks_reserved, 0);
  std::string refused;
  self->request(p.scheduler(), 10s, generate_atom_v, std::uint64_t(2), request_of({3, 4}, 6), caf::actor{})
      .receive([](generation_result&) { ADD_FAILURE() << "request 2 was admitted beyond the budget"; },
               [&](caf::error& e) { refused = describe(e); });
  EXPECT_NE(refused.find("store_exhausted"), std::string::npos) << refused;
  EXPECT_NE(refused.find("request 2"), std::string::npos) << refused;
  EXPECT_NE(refused.find("reserving 8 tokens"), std::string::npos) << refused;
  EXPECT_NE(refused.find("budget"), std::string::npos) << refused;
  bool done = false;
  self->receive_while([&] { return !done; })(
      [](delta_atom, std::uint64_t, std::int32_t, const std::string&) {},
      [&](generation_result& r) {
        EXPECT_EQ(r.tokens.size(), 10u);
        done = true;
      },
      [&](caf::error& e) {
        ADD_FAILURE() << describe(e);
        done = true;
      },
      caf::after(10s) >> [&] {
        ADD_FAILURE() << "request 1 never finished";
        done = true;
      });
  // The reservation left with request 1: request 2 now fits.
  kv_usage u;
  for (int i = 0; i < 100 && (u = p.store_usage()).blocks_used != 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(u.blocks_used, 0);
  EXPECT_EQ(u.blocks_reserved, 0);
  EXPECT_EQ(p.generate(3, request_of({3, 4}, 6), {}, 10s).tokens.size(), 6u);
}

TEST(Pipeline, ARefusedAppendFailsTheRequestEvenWhenItWasItsLastStep) {
  actor_runtime rt;
  fake_compute::options fo;
  // Runs: prefill (0), decodes 1 and 2; the third token ends the request, so
  // only waiting for the store's answer to run 2's rows can catch the refusal.
  fo.bad_rows_at_run = 2;
  pipeline p(rt.system(), fakes(1, fo, std::make_shared<fake_counters>()), fake_options());
  const auto out = run_all(rt.system(), p, {request_of({1}, 3)});
  ASSERT_FALSE(out[0].ok) << "a request whose rows were refused reported success";
  EXPECT_NE(out[0].error.find("kv rows shaped"), std::string::npos) << out[0].error;
  EXPECT_NE(out[0].error.find("request 1"), std::string::npos) << out[0].error;
  EXPECT_EQ(p.stats().requests_done, 0);
  EXPECT_EQ(p.stats().requests_failed, 1);
}

TEST(Pipeline, ComputeFailureBecomesAnErrorResult) {
  actor_runtime rt;
  fake_compute::options fo;
  fo.fail_after_runs = 2;
  pipeline p(rt.system(), fakes(1, fo, std::make_shared<fake_counters>()), fake_options());
  const auto out = run_all(rt.system(), p, {request_of({1}, 10)});
  ASSERT_FALSE(out[0].ok);
  EXPECT_NE(out[0].error.find("worker_failed"), std::string::npos) << out[0].error;
  EXPECT_NE(out[0].error.find("injected device fault"), std::string::npos) << out[0].error;
  // Only that request failed; the scheduler counted it.
  EXPECT_EQ(p.stats().requests_failed, 1);
  EXPECT_EQ(p.stats().requests_done, 0);
}

TEST(Pipeline, DeadWorkerFailsItsRequestsOthersComplete) {
  actor_runtime rt;
  fake_compute::options fo;
  fo.delay = 10ms;
  pipeline p(rt.system(), fakes(2, fo, std::make_shared<fake_counters>()), fake_options());
  caf::scoped_actor self{rt.system()};
  for (int i = 0; i < 2; ++i)
    self->send(caf::actor_cast<caf::actor>(p.scheduler()), generate_atom_v, std::uint64_t(i + 1),
               request_of({i + 1}, 30), caf::actor{});
  std::this_thread::sleep_for(50ms);
  caf::anon_send_exit(p.workers()[0], caf::exit_reason::kill);
  int got = 0, ok = 0, failed = 0;
  std::string why;
  self->receive_for(got, 2)([&](generation_result&) { ++ok; },
                            [&](caf::error& e) {
                              ++failed;
                              why = describe(e);
                            },
                            caf::after(20s) >> [] { FAIL() << "a request hung after its worker died"; });
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(failed, 1);
  EXPECT_NE(why.find("worker 0"), std::string::npos) << why;
  // New work goes to the surviving worker.
  const auto r = p.generate(3, request_of({5}, 3), {}, 10s);
  EXPECT_EQ(r.tokens.size(), 3u);
}

TEST(Pipeline, StepsNeverReadRowsBeforeTheirTransferCompletes) {
  actor_runtime rt;
  auto counters = std::make_shared<fake_counters>();
  fake_compute::options fo;
  fo.scores = true;
  auto o = fake_options();
  o.topk = 3;
  o.transfer.extra_latency = 30ms;  // far longer than a fake step
  pipeline p(rt.system(), fakes(1, fo, counters), o);
  const auto r = p.generate(1, request_of({1, 2, 3, 4, 5}, 6), {}, 20s);
  EXPECT_EQ(r.tokens.size(), 6u);
  // Every decode step got one ticket per layer, with the rows asked for.
  EXPECT_GE(counters->fetched_steps.load(), 4 * fake_layers);
  EXPECT_EQ(counters->fetched_missing.load(), 0);
  EXPECT_EQ(counters->fetched_not_ready.load(), 0);
  EXPECT_EQ(counters->fetched_wrong_rows.load(), 0);
  // Leases are returned; the store is empty again.
  kv_usage u;
  for (int i = 0; i < 100 && (u = p.store_usage()).bytes_used != 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(u.bytes_used, 0);
  EXPECT_EQ(u.leases, 0);
}

TEST(Pipeline, TraceIsChromeJsonWithTracksAndFlows) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("specpipe_trace_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".json");
  {
    actor_runtime rt;
    fake_compute::options fo;
    fo.scores = true;
    auto o = fake_options();
    o.topk = 2;
    o.trace = true;
    o.trace_file = path;
    pipeline p(rt.system(), fakes(1, fo, std::make_shared<fake_counters>()), o);
    p.generate(1, request_of({1, 2, 3}, 5), {}, 10s);
    EXPECT_GT(p.flush_trace(), 0u);
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const auto root = boost::json::parse(ss.str());
  const auto& events = root.at("traceEvents").as_array();
  std::set<std::string> tracks;
  std::map<std::string, std::set<std::uint64_t>> flows;  // phase -> ids
  bool counter = false;
  for (const auto& v : events) {
    const auto& e = v.as_object();
    const std::string ph(e.at("ph").as_string());
    if (ph == "M" && e.at("name") == "thread_name") tracks.insert(std::string(e.at("args").at("name").as_string()));
    if (ph == "s" || ph == "t" || ph == "f") flows[ph].insert(e.at("id").to_number<std::uint64_t>());
    counter = counter || ph == "C";
  }
  for (const char* t : {"scheduler", "worker 0", "planner", "transfer", "kv store"})
    EXPECT_TRUE(tracks.count(t)) << "missing track " << t;
  ASSERT_FALSE(flows["s"].empty());
  // Each flow that ended had started, and went through the transfer.
  for (const auto id : flows["f"]) {
    EXPECT_TRUE(flows["s"].count(id)) << id;
    EXPECT_TRUE(flows["t"].count(id)) << id;
  }
  EXPECT_FALSE(flows["f"].empty());
  EXPECT_TRUE(counter);
  std::filesystem::remove(path);
}

TEST(Pipeline, TracingOffSendsNothing) {
  actor_runtime rt;
  pipeline p(rt.system(), fakes(1, {}, std::make_shared<fake_counters>()), fake_options());
  EXPECT_FALSE(p.tracer());
  EXPECT_EQ(p.flush_trace(), 0u);
  p.generate(1, request_of({1}, 3), {}, 10s);
}

}  // namespace
}  // namespace specpipe::testing
