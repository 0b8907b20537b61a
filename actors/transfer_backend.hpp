#pragma once
// Where the transfer engine's copies run; CAF-free so the CUDA half compiles
// without it. The CPU backend copies with memcpy on the calling (engine)
// thread; the CUDA backend (actors/cuda/) gathers on its own stream and
// records a CUDA event the worker's stream waits on.
#include <cstddef>
#include <memory>
#include <string>

#include "actors/messages.hpp"

namespace specpipe {

class transfer_backend {
 public:
  virtual ~transfer_backend() = default;
  virtual std::string name() const = 0;
  // Staging memory for `bytes` of gathered rows, where attention reads them.
  virtual std::shared_ptr<buffer> staging(std::size_t bytes) = 0;
  // Gathers src's rows into dst (row i of dst = src.rows[i]) and completes
  // `done` once a reader may rely on them. Returns when src may be released
  // (the store's lease); throws std::runtime_error on failure.
  virtual void gather(const gather_source& src, void* dst, transfer_event& done) = 0;
};

std::unique_ptr<transfer_backend> make_cpu_transfer_backend();
// CUDA builds with a visible device only; throws std::runtime_error otherwise.
std::unique_ptr<transfer_backend> make_cuda_transfer_backend(int device);

}  // namespace specpipe
