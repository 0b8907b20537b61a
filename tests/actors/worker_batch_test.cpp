// The worker hands a step's entries to its compute together (run_batch), so
// a device backend can batch them: every entry of a step arrives in one
// call, an entry the compute fails fails only its own request, and the trace
// shows one span per batched forward. The compute here wraps the fake and
// batches its decode entries as a GPU compute does.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include <caf/scoped_actor.hpp>

#include "actors/actor_runtime.hpp"
#include "actors/pipeline.hpp"
#include "actors/pipeline_error.hpp"
#include "fake_compute.hpp"
#include "fake_pipeline.hpp"

namespace specpipe::testing {
namespace {

using namespace std::chrono_literals;

// Runs the fake's entries one by one but reports the decode entries of a
// call as one forward (shared start and end), and fails the decode entries
// of `fail_seq` from its `fail_at`-th decode on. Its first call waits until
// the test opens the gate (after sending every request), so the requests
// share steps however the threads are scheduled: without it a loaded
// machine could finish a request before the next one reached the scheduler.
// Every call also takes at least 2 ms, as a model's forward would: the gate
// alone still let a fast fake finish two requests' dozen decodes while the
// third one's admission waited for a thread (seen once in 200 runs).
class batching_compute final : public step_compute {
 public:
  explicit batching_compute(seq_id fail_seq = 0, int fail_at = -1)
      : inner_({}, std::make_shared<fake_counters>()), fail_seq_(fail_seq), fail_at_(fail_at) {}

  compute_shape shape() const override { return inner_.shape(); }
  void run(const step_entry& e, step_output& out) override { inner_.run(e, out); }
  void run_batch(std::span<const step_entry> entries, std::span<step_output> outs) override {
    {
      std::unique_lock lock(gate_mu_);
      gate_cv_.wait_for(lock, 10s, [&] { return open_; });
    }
    std::this_thread::sleep_for(2ms);
    const double t0 = trace_now_us();
    int decodes = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (!outs[i].error.empty()) continue;
      const step_entry& e = entries[i];
      try {
        if (e.phase == seq_phase::decode && e.seq == fail_seq_ && fail_at_ >= 0 && decodes_of_[e.seq]++ >= fail_at_)
          throw std::runtime_error("injected fault in a batched entry");
        inner_.run(e, outs[i]);
      } catch (const std::exception& ex) {
        outs[i].error = ex.what();
      }
      decodes += e.phase == seq_phase::decode;
    }
    const double t1 = trace_now_us();
    for (auto& out : outs) {
      out.compute_start_us = t0;
      out.compute_end_us = t1;
      out.compute_us = (t1 - t0) / double(outs.size());
    }
    std::lock_guard lock(mu_);
    calls_.push_back(int(entries.size()));
    most_decodes_ = std::max(most_decodes_, decodes);
  }
  void release(seq_id seq) override { inner_.release(seq); }
  std::int64_t sequences() const override { return inner_.sequences(); }
  std::int64_t cache_bytes() const override { return inner_.cache_bytes(); }

  void open_gate() {
    {
      std::lock_guard lock(gate_mu_);
      open_ = true;
    }
    gate_cv_.notify_all();
  }

  int most_decodes() const {
    std::lock_guard lock(mu_);
    return most_decodes_;
  }

 private:
  fake_compute inner_;
  seq_id fail_seq_;
  int fail_at_;
  std::unordered_map<seq_id, int> decodes_of_;
  mutable std::mutex mu_;
  std::vector<int> calls_;
  int most_decodes_ = 0;
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool open_ = false;
};

pipeline_options options_of(const std::filesystem::path& trace = {}) {
  pipeline_options o = fake_options();
  if (!trace.empty()) {
    o.trace = true;
    o.trace_file = trace;
  }
  return o;
}

struct outcome {
  bool ok = false;
  generation_result result;
  std::string error;
};

std::vector<outcome> run_all(caf::actor_system& sys, const pipeline& p, batching_compute& compute, int n,
                             int max_tokens) {
  caf::scoped_actor self{sys};
  for (int i = 0; i < n; ++i)
    self->send(caf::actor_cast<caf::actor>(p.scheduler()), generate_atom_v, std::uint64_t(i + 1),
               request_of({std::int32_t(3 * i + 1)}, max_tokens), caf::actor{});
  compute.open_gate();
  std::vector<outcome> out;
  int got = 0;
  self->receive_for(got, n)(
      [&](generation_result& r) { out.push_back({true, std::move(r), ""}); },
      [&](caf::error& e) { out.push_back({false, {}, describe(e)}); },
      caf::after(20s) >> [&] { ADD_FAILURE() << "timed out"; });
  return out;
}

// The fake continues token t with t + 1: a batched step that mixed up its
// entries' outputs would break the count.
void expect_counting(const generation_result& r, int n) {
  ASSERT_EQ(r.tokens.size(), std::size_t(n));
  for (std::size_t i = 1; i < r.tokens.size(); ++i) EXPECT_EQ(r.tokens[i], (r.tokens[i - 1] + 1) % fake_vocab) << i;
}

TEST(WorkerBatch, EveryEntryOfAStepReachesTheComputeInOneCall) {
  actor_runtime rt;
  auto compute = std::make_shared<batching_compute>();
  pipeline p(rt.system(), {compute}, options_of());
  const auto out = run_all(rt.system(), p, *compute, 3, 12);
  ASSERT_EQ(out.size(), 3u);
  for (const auto& o : out) {
    ASSERT_TRUE(o.ok) << o.error;
    expect_counting(o.result, 12);
  }
  EXPECT_EQ(compute->most_decodes(), 3) << "the three sequences' decodes never shared a step";
}

TEST(WorkerBatch, AFailedEntryFailsOnlyItsOwnRequest) {
  actor_runtime rt;
  auto compute = std::make_shared<batching_compute>(2, 3);  // request 2 fails at its 4th decode
  pipeline p(rt.system(), {compute}, options_of());
  const auto out = run_all(rt.system(), p, *compute, 3, 12);
  ASSERT_EQ(out.size(), 3u);
  int failed = 0;
  for (const auto& o : out) {
    if (o.ok) {
      EXPECT_EQ(o.result.tokens.size(), 12u);
      continue;
    }
    ++failed;
    EXPECT_NE(o.error.find("injected fault in a batched entry"), std::string::npos) << o.error;
    EXPECT_NE(o.error.find("request 2"), std::string::npos) << o.error;
  }
  EXPECT_EQ(failed, 1);
  std::int64_t left = -1;
  for (int i = 0; i < 100 && (left = p.usage_of(0).sequences) != 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(left, 0) << "a sequence's cache outlived its request";
}

TEST(WorkerBatch, TheTraceHasOneSpanPerBatchedForward) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("specpipe_batch_trace_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                     ".json");
  {
    actor_runtime rt;
    auto compute = std::make_shared<batching_compute>();
    pipeline p(rt.system(), {compute}, options_of(path));
    for (const auto& o : run_all(rt.system(), p, *compute, 3, 8)) ASSERT_TRUE(o.ok) << o.error;
    p.flush_trace();
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const auto root = boost::json::parse(ss.str());
  int batched = 0, most = 0;
  for (const auto& v : root.at("traceEvents").as_array()) {
    const auto& e = v.as_object();
    if (e.at("ph") != "X" || e.at("name") != "decode" || !e.contains("args")) continue;
    const auto& args = e.at("args").as_object();
    if (!args.contains("sequences")) continue;
    ++batched;
    most = std::max(most, int(args.at("sequences").to_number<double>()));
  }
  EXPECT_GT(batched, 0) << "no decode span covers several sequences";
  EXPECT_EQ(most, 3);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace specpipe::testing
