#include "actors/transfer_backend.hpp"

#include <stdexcept>

#include "kernels/gather.hpp"

namespace specpipe {
namespace {

// The CPU backend's "device" memory is host memory, so staging is plain host
// memory and the gather is the CPU reference.
class cpu_transfer_backend final : public transfer_backend {
 public:
  std::string name() const override { return "cpu"; }
  std::shared_ptr<buffer> staging(std::size_t bytes) override {
    return std::make_shared<buffer>(host_allocator(), bytes);
  }
  void gather(const gather_source& src, void* dst, transfer_event& done) override {
    kernels::cpu::gather_rows(src.base, src.row_bytes, src.rows, dst);
    done.complete();
  }
};

}  // namespace

std::unique_ptr<transfer_backend> make_cpu_transfer_backend() { return std::make_unique<cpu_transfer_backend>(); }

#ifndef SPECPIPE_HAVE_CUDA
std::unique_ptr<transfer_backend> make_cuda_transfer_backend(int device) {
  throw std::runtime_error("transfer engine: CUDA device " + std::to_string(device) +
                           " requested, but this build has no CUDA backend");
}
#endif

}  // namespace specpipe
