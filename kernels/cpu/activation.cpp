#include "kernels/activation.hpp"

#include <cmath>

namespace specpipe::kernels::cpu {

void silu_mul(const float* gate, const float* up, std::int64_t count, float* out) {
  for (std::int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    // exp(-g) overflows to inf for g < -88, giving g / inf = -0: the right limit.
    out[i] = (g / (1.0f + std::exp(-g))) * up[i];
  }
}

}  // namespace specpipe::kernels::cpu
