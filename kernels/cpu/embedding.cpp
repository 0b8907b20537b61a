#include "kernels/embedding.hpp"

#include <stdexcept>
#include <string>

#include "kernels/cpu/convert.hpp"

namespace specpipe::kernels::cpu {

void embedding(const std::int32_t* ids, std::int64_t n, const void* table, dtype t_type,
               std::int64_t vocab, std::int64_t dim, float* out) {
  for (std::int64_t t = 0; t < n; ++t)
    if (ids[t] < 0 || ids[t] >= vocab)
      throw std::out_of_range("embedding: token id " + std::to_string(ids[t]) + " at index " +
                              std::to_string(t) + " is outside the vocabulary [0, " +
                              std::to_string(vocab) + ")");
  dispatch_float_dtype(t_type, "embedding table", [&](auto loader) {
    using L = decltype(loader);
    const auto* tab = static_cast<const typename L::storage*>(table);
    for (std::int64_t t = 0; t < n; ++t) {
      const auto* row = tab + std::int64_t(ids[t]) * dim;
      for (std::int64_t i = 0; i < dim; ++i) out[t * dim + i] = L::load(row[i]);
    }
  });
}

}  // namespace specpipe::kernels::cpu
