#include "kernels/cpu/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace specpipe::kernels::cpu {
namespace {

TEST(thread_pool, covers_every_index_exactly_once) {
  for (int threads : {1, 2, 3, 5}) {
    thread_pool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (std::int64_t n : {1, 2, 7, 64, 1001}) {
      for (std::int64_t min_chunk : {1, 3, 100}) {
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        pool.parallel_for(n, [&](std::int64_t b, std::int64_t e) {
          ASSERT_LE(0, b);
          ASSERT_LT(b, e);
          ASSERT_LE(e, n);
          for (std::int64_t i = b; i < e; ++i) hits[std::size_t(i)]++;
        }, min_chunk);
        for (std::int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[std::size_t(i)].load(), 1)
              << "threads " << threads << " n " << n << " index " << i;
      }
    }
  }
}

TEST(thread_pool, zero_threads_means_hardware_concurrency) {
  thread_pool pool(0);
  EXPECT_EQ(unsigned(pool.size()), std::max(1u, std::thread::hardware_concurrency()));
}

TEST(thread_pool, single_thread_runs_inline_on_caller) {
  thread_pool pool(1);
  const auto caller = std::this_thread::get_id();
  int calls = 0;
  pool.parallel_for(100, [&](std::int64_t b, std::int64_t e) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 100);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

TEST(thread_pool, uses_several_threads) {
  thread_pool pool(2);
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  // Each chunk waits briefly for a second thread to be inside; with two
  // threads claiming chunks that happens unless the pool is serial.
  pool.parallel_for(8, [&](std::int64_t, std::int64_t) {
    if (++inside > 1) overlapped = true;
    for (int spin = 0; spin < 200 && !overlapped; ++spin)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    --inside;
  });
  EXPECT_TRUE(overlapped.load());
}

TEST(thread_pool, rethrows_first_exception_and_stays_usable) {
  thread_pool pool(3);
  EXPECT_THROW(pool.parallel_for(50, [](std::int64_t b, std::int64_t) {
    if (b >= 10) throw std::runtime_error("chunk failed");
  }), std::runtime_error);
  std::atomic<std::int64_t> sum{0};
  pool.parallel_for(100, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(thread_pool, nested_calls_run_inline) {
  thread_pool pool(2);
  std::atomic<std::int64_t> total{0};
  pool.parallel_for(4, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      pool.parallel_for(10, [&](std::int64_t b2, std::int64_t e2) { total += e2 - b2; });
  });
  EXPECT_EQ(total.load(), 40);
}

TEST(thread_pool, many_small_jobs_back_to_back) {
  thread_pool pool(2);
  std::int64_t expected = 0;
  std::atomic<std::int64_t> got{0};
  for (int job = 0; job < 2000; ++job) {
    const std::int64_t n = 1 + job % 7;
    expected += n;
    pool.parallel_for(n, [&](std::int64_t b, std::int64_t e) { got += e - b; });
  }
  EXPECT_EQ(got.load(), expected);
}

TEST(thread_pool, concurrent_submitters_are_serialized) {
  thread_pool pool(2);
  std::atomic<std::int64_t> got{0};
  auto submit = [&] {
    for (int job = 0; job < 200; ++job)
      pool.parallel_for(16, [&](std::int64_t b, std::int64_t e) { got += e - b; });
  };
  std::thread a(submit), b(submit);
  a.join();
  b.join();
  EXPECT_EQ(got.load(), 2 * 200 * 16);
}

}  // namespace
}  // namespace specpipe::kernels::cpu
