#pragma once
// The whole actor pipeline wired together: tracer, kv store, transfer engine,
// speculation planner, one gpu worker per compute, scheduler. Owns the actor
// handles and stops the actors (flushing the trace) when destroyed. Blocking
// helpers for command-line code; actors talk to `scheduler()` directly.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include <caf/actor_system.hpp>

#include "actors/gpu_worker.hpp"
#include "actors/kv_store.hpp"
#include "actors/scheduler.hpp"
#include "actors/speculation_planner.hpp"
#include "actors/tracer.hpp"
#include "actors/transfer_engine.hpp"

namespace specpipe {

struct pipeline_options {
  std::int64_t max_context = 0;          // tokens per sequence
  std::size_t store_budget_bytes = 0;    // 0: room for every seat at max_context
  std::int64_t block_tokens = 16;
  batch_capacity capacity{};
  std::int32_t max_sequences_per_worker = 8;
  int topk = 64;
  bool trace = false;                    // tracing off sends no messages at all
  std::filesystem::path trace_file;      // written at flush and at exit
  transfer_engine_options transfer{};
  std::shared_ptr<transfer_backend> backend;  // transfers; null: the CPU backend
  std::chrono::milliseconds step_timeout{std::chrono::minutes(5)};
  std::vector<std::int32_t> eos_ids;
  detokenizer detokenize;
  picker_factory make_picker;
};

// A request that ended in an error: what() is the pipeline's description.
class pipeline_failure : public std::runtime_error {
 public:
  pipeline_failure(caf::error e, const std::string& what) : std::runtime_error(what), error_(std::move(e)) {}
  const caf::error& error() const { return error_; }

 private:
  caf::error error_;
};

class pipeline {
 public:
  pipeline(caf::actor_system& sys, std::vector<std::shared_ptr<step_compute>> computes, pipeline_options opts);
  ~pipeline();
  pipeline(const pipeline&) = delete;
  pipeline& operator=(const pipeline&) = delete;

  const scheduler_actor& scheduler() const { return scheduler_; }
  const kv_store_actor& store() const { return store_; }
  const transfer_engine_actor& engine() const { return engine_; }
  const planner_actor& planner() const { return planner_; }
  const tracer_actor& tracer() const { return tracer_; }  // invalid when tracing is off
  const std::vector<gpu_worker_actor>& workers() const { return workers_; }
  const pipeline_options& options() const { return opts_; }

  // Runs one request to its end; on_delta gets each text delta in order.
  // Throws pipeline_failure.
  generation_result generate(std::uint64_t id, const generation_request& req,
                             const std::function<void(std::string_view)>& on_delta = {},
                             std::chrono::milliseconds timeout = std::chrono::minutes(30));

  scheduler_stats stats();
  kv_usage store_usage();
  worker_usage usage_of(std::size_t worker);
  // Writes the trace file now; the number of events (0 with tracing off).
  std::uint64_t flush_trace();

 private:
  caf::actor_system& sys_;
  pipeline_options opts_;
  tracer_actor tracer_;
  kv_store_actor store_;
  transfer_engine_actor engine_;
  planner_actor planner_;
  std::vector<gpu_worker_actor> workers_;
  scheduler_actor scheduler_;
};

}  // namespace specpipe
