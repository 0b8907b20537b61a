#pragma once
// Element types the runtime stores, and the scalar conversions between them.
// Conversions round to nearest even, as PyTorch and the CUDA intrinsics do, so
// that weights written by transformers round-trip bit for bit.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace specpipe {

enum class dtype : std::uint8_t { f32, f16, bf16, i8, u8, i32 };

constexpr std::size_t dtype_size(dtype t) {
  switch (t) {
    case dtype::f32: return 4;
    case dtype::f16: return 2;
    case dtype::bf16: return 2;
    case dtype::i8: return 1;
    case dtype::u8: return 1;
    case dtype::i32: return 4;
  }
  return 0;
}

constexpr std::string_view dtype_name(dtype t) {
  switch (t) {
    case dtype::f32: return "f32";
    case dtype::f16: return "f16";
    case dtype::bf16: return "bf16";
    case dtype::i8: return "i8";
    case dtype::u8: return "u8";
    case dtype::i32: return "i32";
  }
  return "?";
}

// Parses the names used on the command line and in safetensors headers
// ("f32"/"F32"/"float32", "bf16"/"BF16"/"bfloat16", ...).
std::optional<dtype> dtype_from_name(std::string_view name);

inline float bits_to_f32(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline std::uint32_t f32_to_bits(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

inline float bf16_to_f32(std::uint16_t h) { return bits_to_f32(std::uint32_t(h) << 16); }

inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t bits = f32_to_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return std::uint16_t(bits >> 16);
}

// Inline: the CPU attention reads f16 scales, zeros and rows in its loops.
inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: value = mant * 2^-24, exact in f32.
    const float v = float(mant) * bits_to_f32(0x33800000u);
    return bits_to_f32(f32_to_bits(v) | sign);
  }
  if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (mant << 13));
  return bits_to_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}
std::uint16_t f32_to_f16(float f);

}  // namespace specpipe
