#include "memory/tensor.hpp"

namespace specpipe {

tensor_view::tensor_view(void* d, dtype t, std::initializer_list<std::int64_t> dims,
                         memory_kind w, int dev)
    : data(d), type(t), rank(int(dims.size())), where(w), device(dev) {
  if (dims.size() > std::size_t(max_rank))
    throw std::invalid_argument("tensor_view: rank " + std::to_string(dims.size()) +
                                " exceeds " + std::to_string(max_rank));
  int i = 0;
  for (auto d_ : dims) shape[std::size_t(i++)] = d_;
  std::int64_t s = 1;
  for (int k = rank - 1; k >= 0; --k) {
    strides[std::size_t(k)] = s;
    s *= shape[std::size_t(k)];
  }
}

std::int64_t tensor_view::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[std::size_t(i)];
  return n;
}

bool tensor_view::contiguous() const {
  std::int64_t s = 1;
  for (int k = rank - 1; k >= 0; --k) {
    if (shape[std::size_t(k)] != 1 && strides[std::size_t(k)] != s) return false;
    s *= shape[std::size_t(k)];
  }
  return true;
}

tensor_view tensor_view::slice0(std::int64_t begin, std::int64_t end) const {
  if (rank == 0 || begin < 0 || end < begin || end > shape[0])
    throw std::out_of_range("tensor_view::slice0 [" + std::to_string(begin) + ", " +
                            std::to_string(end) + ") of " + describe());
  tensor_view v = *this;
  v.data = static_cast<char*>(data) + std::size_t(begin * strides[0]) * dtype_size(type);
  v.shape[0] = end - begin;
  return v;
}

std::string tensor_view::describe() const {
  std::string s(dtype_name(type));
  s += '[';
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[std::size_t(i)]);
  }
  s += ']';
  return s;
}

}  // namespace specpipe
