#include "kernels/norm.hpp"

#include <cmath>

#include "kernels/cpu/convert.hpp"

namespace specpipe::kernels::cpu {

namespace {

template <class L>
void rms_norm_row(const float* x, std::int64_t dim, const typename L::storage* w, float eps,
                  float* y) {
  // Sum of squares in double: the mean must not lose digits for large dims
  // or outliers; it is O(dim) next to the O(dim^2) projections around it.
  double ss = 0.0;
  for (std::int64_t i = 0; i < dim; ++i) ss += double(x[i]) * double(x[i]);
  const float inv = float(1.0 / std::sqrt(ss / double(dim) + double(eps)));
  for (std::int64_t i = 0; i < dim; ++i) y[i] = L::load(w[i]) * (x[i] * inv);
}

}  // namespace

void rms_norm(const float* x, std::int64_t n, std::int64_t dim, const void* weight, dtype w_type,
              float eps, float* y) {
  dispatch_float_dtype(w_type, "rms_norm weight", [&](auto loader) {
    using L = decltype(loader);
    const auto* w = static_cast<const typename L::storage*>(weight);
    for (std::int64_t t = 0; t < n; ++t) rms_norm_row<L>(x + t * dim, dim, w, eps, y + t * dim);
  });
}

void add_rms_norm(float* residual, const float* delta, std::int64_t n, std::int64_t dim,
                  const void* weight, dtype w_type, float eps, float* y) {
  dispatch_float_dtype(w_type, "add_rms_norm weight", [&](auto loader) {
    using L = decltype(loader);
    const auto* w = static_cast<const typename L::storage*>(weight);
    for (std::int64_t t = 0; t < n; ++t) {
      float* r = residual + t * dim;
      const float* d = delta + t * dim;
      for (std::int64_t i = 0; i < dim; ++i) r[i] += d[i];
      rms_norm_row<L>(r, dim, w, eps, y + t * dim);
    }
  });
}

}  // namespace specpipe::kernels::cpu
