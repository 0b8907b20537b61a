#include "memory/allocator.hpp"

#include <cstdio>
#include <cstring>
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

std::unique_ptr<allocator> make_pinned_allocator(pinned_pages) { return make_pinned_allocator(); }

void* pinned_device_pointer(void* p) { return p; }

int cuda_device_count() { return 0; }

std::unique_ptr<allocator> make_device_allocator(int device) {
  throw memory_error("device memory on CUDA device " + std::to_string(device) +
                     " requested, but this build has no CUDA backend (configure with "
                     "-DSPECPIPE_CUDA=ON)");
}
#endif

const char* pinned_pages_name(pinned_pages p) {
  switch (p) {
    case pinned_pages::driver: return "driver";
    case pinned_pages::transparent: return "thp";
    case pinned_pages::hugetlb: return "hugetlb";
    case pinned_pages::pool: return "pool";
  }
  return "?";
}

double huge_page_fraction(const void* p, std::size_t bytes) {
  if (bytes == 0) return 0;
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  const auto lo = reinterpret_cast<std::uintptr_t>(p), hi = lo + bytes;
  // smaps: a header line "start-end perms ..." per mapping, then "Key: N kB"
  // lines. Huge pages are counted per mapping, so a mapping that only partly
  // overlaps the range is credited in proportion to the overlap.
  double huge = 0, overlap_share = 0;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    std::uintmax_t a = 0, b = 0;
    // Only a mapping's header parses as "hex-hex" (keys such as "AnonHugePages:"
    // stop after one hex digit).
    if (std::sscanf(line, "%jx-%jx", &a, &b) == 2) {
      const auto s = std::uintptr_t(a), e = std::uintptr_t(b);
      const auto o_lo = s > lo ? s : lo, o_hi = e < hi ? e : hi;
      overlap_share = o_hi > o_lo && e > s ? double(o_hi - o_lo) / double(e - s) : 0;
      continue;
    }
    if (overlap_share <= 0) continue;
    unsigned long long kb = 0;
    if (std::sscanf(line, "AnonHugePages: %llu kB", &kb) == 1 || std::sscanf(line, "Private_Hugetlb: %llu kB", &kb) == 1 ||
        std::sscanf(line, "Shared_Hugetlb: %llu kB", &kb) == 1)
      huge += overlap_share * double(kb) * 1024.0;
  }
  std::fclose(f);
  const double frac = huge / double(bytes);
  return frac > 1 ? 1 : frac;
}

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
