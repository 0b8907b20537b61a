#include "actors/transfer_event.hpp"

#include "actors/trace_event.hpp"

namespace specpipe {

#ifdef SPECPIPE_HAVE_CUDA
// actors/cuda/transfer_event_cuda.cpp
std::string cuda_stream_wait_event(void* stream, void* event);
void cuda_event_destroy(void* event) noexcept;
#endif

transfer_event::~transfer_event() {
#ifdef SPECPIPE_HAVE_CUDA
  if (cuda_event) cuda_event_destroy(cuda_event);
#endif
}

void transfer_event::complete(std::string error) {
  {
    std::lock_guard lock(m_);
    done_ = true;
    at_us_ = trace_now_us();
    error_ = std::move(error);
  }
  cv_.notify_all();
}

bool transfer_event::ready() const {
  std::lock_guard lock(m_);
  return done_;
}

double transfer_event::completed_at_us() const {
  std::lock_guard lock(m_);
  return at_us_;
}

std::string transfer_event::wait() const {
  std::unique_lock lock(m_);
  cv_.wait(lock, [&] { return done_; });
  return error_;
}

std::string transfer_event::wait_on_stream([[maybe_unused]] void* stream) const {
#ifdef SPECPIPE_HAVE_CUDA
  if (cuda_event && stream) {
    // The engine completes the host side right after enqueuing the copy and
    // recording the event, so this wait is short; the GPU-side ordering is
    // the stream wait.
    if (std::string e = wait(); !e.empty()) return e;
    return cuda_stream_wait_event(stream, cuda_event);
  }
#endif
  return wait();
}

}  // namespace specpipe
