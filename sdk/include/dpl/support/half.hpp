// dpl SDK, C++ plugin support: float32 <-> IEEE float16 and bfloat16 bit patterns, rounding to
// nearest even, NaN kept NaN, overflow to infinity. Integer arithmetic only, so the result does
// not depend on the floating-point environment or on compiler support for _Float16. The launcher
// uses the same functions for --grad-compression, so host and plugins round alike.
#ifndef DPL_SUPPORT_HALF_HPP
#define DPL_SUPPORT_HALF_HPP

#include <cstdint>
#include <cstring>

namespace dpl::support {

inline uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline float FloatFromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

inline uint16_t FloatToHalf(float value) {
  const uint32_t bits = FloatBits(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const int32_t exponent = int32_t((bits >> 23) & 0xFF) - 127 + 15;
  uint32_t mantissa = bits & 0x7FFFFFu;
  if (((bits >> 23) & 0xFF) == 0xFF) return uint16_t(sign | 0x7C00u | (mantissa ? 0x200u : 0));
  if (exponent >= 31) return uint16_t(sign | 0x7C00u);  // overflow -> inf
  if (exponent <= 0) {                                  // a subnormal half, or zero
    if (exponent < -10) return uint16_t(sign);
    mantissa |= 0x800000u;
    const int shift = 14 - exponent;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = (uint32_t(exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into exponent
  return uint16_t(sign | half);
}

inline float HalfToFloat(uint16_t half) {
  const uint32_t sign = uint32_t(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1Fu;
  uint32_t mantissa = half & 0x3FFu;
  if (exponent == 0) {
    if (mantissa == 0) return FloatFromBits(sign);
    exponent = 127 - 15 + 1;  // subnormal: normalise
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    return FloatFromBits(sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13));
  }
  if (exponent == 0x1F) return FloatFromBits(sign | 0x7F800000u | (mantissa << 13));
  return FloatFromBits(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

inline uint16_t FloatToBfloat16(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((bits >> 16) | 0x40u);  // quiet NaN
  return uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

inline float Bfloat16ToFloat(uint16_t value) {
  return FloatFromBits(uint32_t(value) << 16);
}

}  // namespace dpl::support

#endif  // DPL_SUPPORT_HALF_HPP
