#include "memory/allocator.hpp"

#include <new>
#include <utility>

namespace specpipe {
namespace {

constexpr std::align_val_t host_alignment{256};

class host_allocator_impl final : public allocator {
 public:
  void* allocate(std::size_t bytes) override {
    return ::operator new(bytes == 0 ? 1 : bytes, host_alignment);
  }
  void deallocate(void* p, std::size_t) noexcept override { ::operator delete(p, host_alignment); }
  memory_kind kind() const override { return memory_kind::host; }
};

}  // namespace

allocator& host_allocator() {
  static host_allocator_impl instance;
  return instance;
}

#ifndef SPECPIPE_HAVE_CUDA
bool cuda_available() { return false; }

std::unique_ptr<allocator> make_pinned_allocator() {
  // Without CUDA, "pinned" memory is host memory; the KV store and transfer
  // engine behave the same, only without page locking.
  struct plain_pinned final : allocator {
    void* allocate(std::size_t bytes) override { return host_allocator().allocate(bytes); }
    void deallocate(void* p, std::size_t n) noexcept override { host_allocator().deallocate(p, n); }
    memory_kind kind() const override { return memory_kind::pinned; }
  };
  return std::make_unique<plain_pinned>();
}

std::unique_ptr<allocator> make_device_allocator(int device) {
  throw memory_error("device memory on CUDA device " + std::to_string(device) +
                     " requested, but this build has no CUDA backend (configure with "
                     "-DSPECPIPE_CUDA=ON)");
}
#endif

buffer::buffer(allocator& a, std::size_t bytes) : alloc_(&a), data_(a.allocate(bytes)), bytes_(bytes) {}

buffer::~buffer() { release(); }

buffer::buffer(buffer&& o) noexcept
    : alloc_(std::exchange(o.alloc_, nullptr)),
      data_(std::exchange(o.data_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)) {}

buffer& buffer::operator=(buffer&& o) noexcept {
  if (this != &o) {
    release();
    alloc_ = std::exchange(o.alloc_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

memory_kind buffer::kind() const { return alloc_ ? alloc_->kind() : memory_kind::host; }

void buffer::release() noexcept {
  if (alloc_ && data_) alloc_->deallocate(data_, bytes_);
  alloc_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace specpipe
