#include "memory/dtype.hpp"

#include <cmath>
#include <string>

namespace specpipe {

std::optional<dtype> dtype_from_name(std::string_view name) {
  std::string n(name);
  for (auto& c : n) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (n == "f32" || n == "float32" || n == "float") return dtype::f32;
  if (n == "f16" || n == "float16" || n == "half") return dtype::f16;
  if (n == "bf16" || n == "bfloat16") return dtype::bf16;
  if (n == "i8" || n == "int8") return dtype::i8;
  if (n == "u8" || n == "uint8") return dtype::u8;
  if (n == "i32" || n == "int32") return dtype::i32;
  return std::nullopt;
}

std::uint16_t f32_to_f16(float f) {
  const std::uint32_t bits = f32_to_bits(f);
  const std::uint16_t sign = std::uint16_t((bits >> 16) & 0x8000u);
  const std::uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to or beyond infinity
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): round abs * 2^24 to nearest even integer.
    if (abs < 0x33000000u) return sign;  // below half of the smallest subnormal
    const std::uint32_t exp = abs >> 23;
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exp;  // 14..24 for this range
    std::uint32_t q = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return sign | std::uint16_t(q);
  }
  // Normal: rebias exponent, round 23-bit mantissa to 10 bits, nearest even.
  std::uint32_t v = abs - (112u << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  return sign | std::uint16_t(v >> 13);
}

}  // namespace specpipe
