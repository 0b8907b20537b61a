#pragma once
// A persistent pool of worker threads for the CPU backend. parallel_for splits
// [0, n) into chunks that the workers and the calling thread claim from one
// atomic counter, so uneven chunks balance themselves. Threads are created once;
// a call allocates nothing, which keeps a decode step allocation-free.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace specpipe::kernels::cpu {

class thread_pool {
 public:
  // threads <= 0: std::thread::hardware_concurrency(). A pool of 1 runs every
  // parallel_for inline on the calling thread.
  explicit thread_pool(int threads = 0);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int size() const { return threads_; }

  // Calls fn(begin, end) over disjoint ranges covering [0, n), each at least
  // min_chunk long (except the last). Returns when all ranges are done; the
  // first exception thrown by fn is rethrown here. Nested calls from inside
  // fn run inline.
  template <class F>
  void parallel_for(std::int64_t n, F&& fn, std::int64_t min_chunk = 1) {
    using fn_t = std::remove_reference_t<F>;
    run(n, min_chunk, &trampoline<fn_t>, const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using range_fn = void (*)(void* ctx, std::int64_t begin, std::int64_t end);

  template <class F>
  static void trampoline(void* ctx, std::int64_t begin, std::int64_t end) {
    (*static_cast<F*>(ctx))(begin, end);
  }

  void run(std::int64_t n, std::int64_t min_chunk, range_fn fn, void* ctx);
  void worker_loop();
  void work_on_current_job();

  int threads_ = 1;
  std::vector<std::thread> workers_;

  std::mutex submit_mutex_;  // one job at a time when several threads share the pool

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::uint64_t generation_ = 0;  // bumped per job; workers wait for a change
  bool stop_ = false;
  int busy_workers_ = 0;

  // The current job, written under mutex_ before generation_ is bumped.
  range_fn job_fn_ = nullptr;
  void* job_ctx_ = nullptr;
  std::int64_t job_n_ = 0;
  std::int64_t job_chunk_ = 1;
  std::atomic<std::int64_t> next_{0};
  std::exception_ptr error_;
  std::mutex error_mutex_;
};

}  // namespace specpipe::kernels::cpu
