#pragma once
// The device-side plumbing model and app code need without seeing CUDA:
// properties, streams, cuBLAS handles, event timing, copies and memory
// figures. Every call is checked; failures throw cuda_error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_error.hpp"

namespace specpipe::kernels::cuda {

struct device_properties {
  int ordinal = 0;
  std::string name;
  int sm_count = 0;
  int major = 0, minor = 0;
  std::size_t total_memory = 0;
  std::size_t l2_bytes = 0;
  std::size_t max_smem_per_block_optin = 0;
};

device_properties query_device(int ordinal);
void set_device(int ordinal);
void device_synchronize();

struct memory_info {
  std::size_t free = 0, total = 0;
};
memory_info query_memory();

// An owned, non-blocking CUDA stream.
class stream {
 public:
  stream();
  ~stream();
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  stream_t get() const { return s_; }
  void synchronize() const;

 private:
  stream_t s_ = nullptr;
};

// An owned cuBLAS handle with a fixed workspace (so that calls can be
// captured in a CUDA graph without cuBLAS allocating).
class blas_handle {
 public:
  blas_handle();
  ~blas_handle();
  blas_handle(const blas_handle&) = delete;
  blas_handle& operator=(const blas_handle&) = delete;
  blas_handle_t get() const { return h_; }

 private:
  blas_handle_t h_ = nullptr;
  void* workspace_ = nullptr;
};

// Elapsed device time between two events recorded on a stream.
class event_timer {
 public:
  event_timer();
  ~event_timer();
  event_timer(const event_timer&) = delete;
  event_timer& operator=(const event_timer&) = delete;
  void start(stream_t s);
  void stop(stream_t s);
  // Waits for the stop event; milliseconds between start and stop.
  float elapsed_ms() const;

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

// An ordering point between streams (no timing): record() on one stream,
// then wait_on() makes another stream's later work wait for everything
// issued before the record, on the device (no host sync). Inside a graph
// capture the pair becomes an edge of the graph.
class stream_event {
 public:
  stream_event();
  ~stream_event();
  stream_event(const stream_event&) = delete;
  stream_event& operator=(const stream_event&) = delete;
  stream_event(stream_event&& o) noexcept;
  stream_event& operator=(stream_event&&) = delete;
  void record(stream_t s);
  void wait_on(stream_t s) const;  // s waits for the last record

 private:
  void* e_ = nullptr;
};

// A timing event: record() on a stream; ms_between(a, b) waits for b and
// returns the device time from a to b (both recorded outside graphs).
class timing_event {
 public:
  timing_event();
  ~timing_event();
  timing_event(const timing_event&) = delete;
  timing_event& operator=(const timing_event&) = delete;
  timing_event(timing_event&& o) noexcept;
  timing_event& operator=(timing_event&&) = delete;
  void record(stream_t s);
  static float ms_between(const timing_event& a, const timing_event& b);

 private:
  void* e_ = nullptr;
};

// A CUDA graph captured from the work issued on a stream between begin and
// end; replays it with launch().
class graph {
 public:
  graph() = default;
  ~graph();
  graph(const graph&) = delete;
  graph& operator=(const graph&) = delete;
  graph(graph&& o) noexcept;
  graph& operator=(graph&& o) noexcept;
  static void begin_capture(stream_t s);
  static graph end_capture(stream_t s);
  void launch(stream_t s) const;
  bool empty() const { return exec_ == nullptr; }

 private:
  void* exec_ = nullptr;
};

void copy_to_device(void* dst, const void* src, std::size_t bytes, stream_t s);
void copy_to_host(void* dst, const void* src, std::size_t bytes, stream_t s);
void copy_on_device(void* dst, const void* src, std::size_t bytes, stream_t s);
// `rows` pieces of `width` bytes, src_pitch bytes apart in src and
// dst_pitch apart in dst (device to device).
void copy_rows_on_device(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t width,
                         std::size_t rows, stream_t s);
void fill_bytes(void* dst, int value, std::size_t bytes, stream_t s);

// Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes
// written, median over `repeats` copies of `bytes` between two fresh buffers
// (large enough to defeat the L2 cache).
double measure_copy_bandwidth(std::size_t bytes, int repeats);

}  // namespace specpipe::kernels::cuda
