#pragma once
// Branch-free element loads from f32/f16/bf16 storage into f32, written so that
// g++ vectorizes them inside the kernels' inner loops (dtype.hpp's f16_to_f32 is
// the readable scalar version; tests check these agree with it on all 65536 codes).
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "memory/dtype.hpp"

namespace specpipe::kernels::cpu {

struct load_f32 {
  using storage = float;
  static float load(float v) { return v; }
};

struct load_bf16 {
  using storage = std::uint16_t;
  // bf16 is the top half of an f32: widen by shifting the bits.
  static float load(std::uint16_t h) {
    const std::uint32_t bits = std::uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};

struct load_f16 {
  using storage = std::uint16_t;
  // Moves exponent and mantissa into f32 position and multiplies by 2^112 to
  // rebias the exponent (15 -> 127); that also turns half subnormals into the
  // right f32 normals exactly. Inf/NaN (exponent 31) get the f32 all-ones
  // exponent ORed in, keeping the payload.
  static float load(std::uint16_t h) {
    const std::uint32_t em = std::uint32_t(h & 0x7fffu) << 13;
    float f;
    std::memcpy(&f, &em, 4);
    f *= 0x1p112f;
    std::uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits |= (em >= (0x7c00u << 13)) ? 0x7f800000u : 0u;
    bits |= std::uint32_t(h & 0x8000u) << 16;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};

// Calls fn(loader{}) for the loader matching `t`; throws std::invalid_argument
// naming `what` for a dtype that is not a float format.
template <class Fn>
decltype(auto) dispatch_float_dtype(dtype t, const char* what, Fn&& fn) {
  switch (t) {
    case dtype::f32: return fn(load_f32{});
    case dtype::f16: return fn(load_f16{});
    case dtype::bf16: return fn(load_bf16{});
    default: break;
  }
  throw std::invalid_argument(std::string(what) + ": dtype " + std::string(dtype_name(t)) +
                              " is not supported (expected f32, f16 or bf16)");
}

}  // namespace specpipe::kernels::cpu
