#pragma once
// A non-owning view of an n-dimensional array: element type, shape, strides
// (in elements) and where the bytes live. Views never allocate; ownership sits
// with a `buffer` (memory/buffer.hpp) or a mapped file (model/safetensors.hpp).
#include <array>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "memory/dtype.hpp"

namespace specpipe {

enum class memory_kind : std::uint8_t { host, pinned, device };

constexpr std::string_view memory_kind_name(memory_kind k) {
  switch (k) {
    case memory_kind::host: return "host";
    case memory_kind::pinned: return "pinned";
    case memory_kind::device: return "device";
  }
  return "?";
}

struct tensor_view {
  static constexpr int max_rank = 4;

  void* data = nullptr;
  dtype type = dtype::f32;
  int rank = 0;
  std::array<std::int64_t, max_rank> shape{};
  std::array<std::int64_t, max_rank> strides{};  // in elements
  memory_kind where = memory_kind::host;
  int device = -1;  // CUDA ordinal when where == device

  tensor_view() = default;
  // A contiguous (row-major) view.
  tensor_view(void* d, dtype t, std::initializer_list<std::int64_t> dims,
              memory_kind w = memory_kind::host, int dev = -1);

  std::int64_t dim(int i) const { return shape.at(std::size_t(i)); }
  std::int64_t numel() const;
  std::size_t bytes() const { return std::size_t(numel()) * dtype_size(type); }
  bool contiguous() const;
  bool empty() const { return data == nullptr; }

  template <class T>
  T* as() const { return static_cast<T*>(data); }

  // A view of rows [begin, end) along dimension 0.
  tensor_view slice0(std::int64_t begin, std::int64_t end) const;

  // "bf16[4096, 128]"
  std::string describe() const;
};

}  // namespace specpipe
