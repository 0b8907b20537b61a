#pragma once
// Completion of one gather, shared by the transfer engine (which completes
// it) and the worker (which must not read the rows before). On the CPU
// backend the worker waits on the host; in CUDA builds the engine also
// records a CUDA event on its copy stream and the worker makes its own stream
// wait on it (cudaStreamWaitEvent), so no host thread blocks on the GPU.
#include <condition_variable>
#include <mutex>
#include <string>

namespace specpipe {

class transfer_event {
 public:
  transfer_event() = default;
  ~transfer_event();
  transfer_event(const transfer_event&) = delete;
  transfer_event& operator=(const transfer_event&) = delete;

  // Marks the rows as there (error empty) or lost (error says why).
  void complete(std::string error = {});
  bool ready() const;
  double completed_at_us() const;  // trace clock; 0 while pending

  // Blocks until complete; returns the error ("" when the rows are there).
  std::string wait() const;

  // Makes `stream` (a cudaStream_t) wait for the copy when the engine
  // recorded a CUDA event; otherwise waits on the host. Returns the error.
  std::string wait_on_stream(void* stream) const;

  // Set by the CUDA transfer backend before complete(); owned by this object.
  void* cuda_event = nullptr;

 private:
  mutable std::mutex m_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  double at_us_ = 0;
  std::string error_;
};

}  // namespace specpipe
