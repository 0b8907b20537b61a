#include "kernels/cpu/thread_pool.hpp"

#include <algorithm>
#include <exception>

namespace specpipe::kernels::cpu {

namespace {
// Set on pool workers and on a caller while it runs a job, so a nested
// parallel_for runs inline instead of deadlocking on submit_mutex_.
thread_local bool inside_pool_job = false;
}  // namespace

thread_pool::thread_pool(int threads) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  threads_ = threads;
  workers_.reserve(std::size_t(threads_ - 1));
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void thread_pool::work_on_current_job() {
  for (;;) {
    const std::int64_t begin = next_.fetch_add(job_chunk_, std::memory_order_relaxed);
    if (begin >= job_n_) return;
    const std::int64_t end = std::min(job_n_, begin + job_chunk_);
    try {
      job_fn_(job_ctx_, begin, end);
    } catch (...) {
      std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
      // Stop handing out further chunks; the job has failed.
      next_.store(job_n_, std::memory_order_relaxed);
      return;
    }
  }
}

void thread_pool::worker_loop() {
  inside_pool_job = true;
  std::uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++busy_workers_;
    }
    work_on_current_job();
    {
      std::lock_guard lock(mutex_);
      --busy_workers_;
    }
    done_.notify_all();
  }
}

void thread_pool::run(std::int64_t n, std::int64_t min_chunk, range_fn fn, void* ctx) {
  if (n <= 0) return;
  min_chunk = std::max<std::int64_t>(1, min_chunk);
  if (threads_ == 1 || inside_pool_job || n <= min_chunk) {
    fn(ctx, 0, n);
    return;
  }
  std::lock_guard submit(submit_mutex_);
  // About four chunks per thread: enough to even out imbalance, few enough
  // that the atomic counter is not contended.
  const std::int64_t target = (n + std::int64_t(threads_) * 4 - 1) / (std::int64_t(threads_) * 4);
  {
    // A worker that woke late for the previous job may still be inside
    // work_on_current_job (finding nothing left); let it leave first.
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return busy_workers_ == 0; });
    job_fn_ = fn;
    job_ctx_ = ctx;
    job_n_ = n;
    job_chunk_ = std::max(min_chunk, target);
    next_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  inside_pool_job = true;
  work_on_current_job();
  inside_pool_job = false;
  {
    // Workers that woke for this generation finish before we return; a worker
    // that wakes late finds next_ exhausted and does nothing with fn or ctx.
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return busy_workers_ == 0; });
    job_fn_ = nullptr;
    job_ctx_ = nullptr;
  }
  if (error_) std::rethrow_exception(error_);
}

}  // namespace specpipe::kernels::cpu
