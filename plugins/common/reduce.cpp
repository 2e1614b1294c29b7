#include "reduce.hpp"

#include <algorithm>
#include <cmath>

namespace dpl::plugin {

float half_to_float(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1Fu;
  uint32_t mantissa = half & 0x3FFu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3FFu;
      bits = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

uint16_t float_to_half(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits >= 0x7F800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7C00u | (abs_bits > 0x7F800000u ? 0x200u : 0u));
  }
  if (abs_bits >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // overflow
  if (abs_bits < 0x38800000u) {  // subnormal or zero in half
    float abs_value;
    std::memcpy(&abs_value, &abs_bits, sizeof(abs_value));
    const float scaled = abs_value * 16777216.0f;  // 2^24: one unit = smallest subnormal
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
  }
  const uint32_t exponent = ((abs_bits >> 23) - 127 + 15) << 10;
  const uint32_t mantissa = abs_bits & 0x7FFFFFu;
  uint32_t half = exponent | (mantissa >> 13);
  const uint32_t remainder = mantissa & 0x1FFFu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

uint16_t float_to_bfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

namespace {

template <typename T>
void reduce_typed(dpl_reduce_op op, T* target, const T* source, size_t count) {
  switch (op) {
    case DPL_REDUCE_SUM:
    case DPL_REDUCE_AVG:
      for (size_t i = 0; i < count; ++i) target[i] = static_cast<T>(target[i] + source[i]);
      return;
    case DPL_REDUCE_MIN:
      for (size_t i = 0; i < count; ++i) target[i] = std::min(target[i], source[i]);
      return;
    case DPL_REDUCE_MAX:
      for (size_t i = 0; i < count; ++i) target[i] = std::max(target[i], source[i]);
      return;
  }
  throw PluginError(DPL_ERR_UNSUPPORTED, "unknown reduce op " + std::to_string(op));
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void reduce_16bit(dpl_reduce_op op, uint16_t* target, const uint16_t* source, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const float a = ToFloat(target[i]);
    const float b = ToFloat(source[i]);
    float result = 0;
    switch (op) {
      case DPL_REDUCE_SUM:
      case DPL_REDUCE_AVG:
        result = a + b;
        break;
      case DPL_REDUCE_MIN:
        result = std::min(a, b);
        break;
      case DPL_REDUCE_MAX:
        result = std::max(a, b);
        break;
      default:
        throw PluginError(DPL_ERR_UNSUPPORTED, "unknown reduce op " + std::to_string(op));
    }
    target[i] = FromFloat(result);
  }
}

template <typename T>
void divide_typed(T* data, size_t count, int divisor) {
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<T>(data[i] / static_cast<T>(divisor));
}

}  // namespace

void reduce_into(ElementType type, dpl_reduce_op op, void* target, const void* source,
                 size_t count) {
  switch (type) {
    case ElementType::kFloat32:
      return reduce_typed(op, static_cast<float*>(target), static_cast<const float*>(source),
                          count);
    case ElementType::kFloat64:
      return reduce_typed(op, static_cast<double*>(target), static_cast<const double*>(source),
                          count);
    case ElementType::kInt32:
      return reduce_typed(op, static_cast<int32_t*>(target), static_cast<const int32_t*>(source),
                          count);
    case ElementType::kInt64:
      return reduce_typed(op, static_cast<int64_t*>(target), static_cast<const int64_t*>(source),
                          count);
    case ElementType::kInt8:
      return reduce_typed(op, static_cast<int8_t*>(target), static_cast<const int8_t*>(source),
                          count);
    case ElementType::kUInt8:
      return reduce_typed(op, static_cast<uint8_t*>(target), static_cast<const uint8_t*>(source),
                          count);
    case ElementType::kFloat16:
      return reduce_16bit<half_to_float, float_to_half>(
          op, static_cast<uint16_t*>(target), static_cast<const uint16_t*>(source), count);
    case ElementType::kBFloat16:
      return reduce_16bit<bfloat16_to_float, float_to_bfloat16>(
          op, static_cast<uint16_t*>(target), static_cast<const uint16_t*>(source), count);
    case ElementType::kUnknown:
      break;
  }
  throw PluginError(DPL_ERR_UNSUPPORTED, "no reduction for this element type");
}

void divide_in_place(ElementType type, void* data, size_t count, int divisor) {
  switch (type) {
    case ElementType::kFloat32:
      return divide_typed(static_cast<float*>(data), count, divisor);
    case ElementType::kFloat64:
      return divide_typed(static_cast<double*>(data), count, divisor);
    case ElementType::kInt32:
      return divide_typed(static_cast<int32_t*>(data), count, divisor);
    case ElementType::kInt64:
      return divide_typed(static_cast<int64_t*>(data), count, divisor);
    case ElementType::kInt8:
      return divide_typed(static_cast<int8_t*>(data), count, divisor);
    case ElementType::kUInt8:
      return divide_typed(static_cast<uint8_t*>(data), count, divisor);
    case ElementType::kFloat16: {
      auto* values = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) {
        values[i] = float_to_half(half_to_float(values[i]) / static_cast<float>(divisor));
      }
      return;
    }
    case ElementType::kBFloat16: {
      auto* values = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) {
        values[i] = float_to_bfloat16(bfloat16_to_float(values[i]) / static_cast<float>(divisor));
      }
      return;
    }
    case ElementType::kUnknown:
      break;
  }
  throw PluginError(DPL_ERR_UNSUPPORTED, "no division for this element type");
}

}  // namespace dpl::plugin
