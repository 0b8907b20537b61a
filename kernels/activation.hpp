#pragma once
// SwiGLU's elementwise part (Llama MLP): out = silu(gate) * up, with
// silu(g) = g / (1 + exp(-g)), in f32.
#include <cstdint>

namespace specpipe::kernels::cpu {

// gate, up, out: `count` floats; out may alias gate or up.
void silu_mul(const float* gate, const float* up, std::int64_t count, float* out);

}  // namespace specpipe::kernels::cpu
