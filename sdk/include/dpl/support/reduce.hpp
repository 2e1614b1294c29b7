// dpl SDK, C++ plugin support: element-wise reductions over host buffers, dispatched by element
// type and operator, for backends that reduce in host memory. float16 and bfloat16 are reduced in
// float32 and rounded back (dpl/support/half.hpp).
#ifndef DPL_SUPPORT_REDUCE_HPP
#define DPL_SUPPORT_REDUCE_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "dpl/backend_v1.h"
#include "dpl/support/error.hpp"
#include "dpl/support/half.hpp"
#include "dpl/support/tensor.hpp"

namespace dpl::support {

inline const char* ReduceOpName(dpl_reduce_op op) {
  switch (op) {
    case DPL_REDUCE_SUM:
      return "sum";
    case DPL_REDUCE_AVG:
      return "avg";
    case DPL_REDUCE_MIN:
      return "min";
    case DPL_REDUCE_MAX:
      return "max";
  }
  return "unknown";
}

// Refuses an op outside sum, avg, min and max, naming the collective `what` (DPL_ERR_UNSUPPORTED).
inline void CheckReduceOp(dpl_reduce_op op, const char* what) {
  if (op < DPL_REDUCE_SUM || op > DPL_REDUCE_MAX) {
    throw PluginError(DPL_ERR_UNSUPPORTED, std::string(what) + " does not support op " +
                                               std::to_string(op) + "; use sum, avg, min or max");
  }
}

// The element type of `dtype`, refusing one the host backends do not reduce, naming `what`.
inline ElementType ReducibleElementType(const DLDataType& dtype, const char* what) {
  const ElementType type = ElementTypeOf(dtype);
  if (type == ElementType::kUnknown) {
    throw PluginError(DPL_ERR_UNSUPPORTED,
                      std::string(what) + " does not support dtype " + DtypeName(dtype) +
                          "; use float16, bfloat16, float32, float64, int8, uint8, int32 or int64");
  }
  return type;
}

namespace detail {

inline PluginError UnknownOp(dpl_reduce_op op) {
  return PluginError(DPL_ERR_UNSUPPORTED, "unknown reduce op " + std::to_string(op));
}

template <typename T>
void ReduceTyped(dpl_reduce_op op, T* target, const T* source, size_t count) {
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
  throw UnknownOp(op);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void Reduce16Bit(dpl_reduce_op op, uint16_t* target, const uint16_t* source, size_t count) {
  if (op != DPL_REDUCE_SUM && op != DPL_REDUCE_AVG && op != DPL_REDUCE_MIN &&
      op != DPL_REDUCE_MAX) {
    throw UnknownOp(op);
  }
  for (size_t i = 0; i < count; ++i) {
    const float a = ToFloat(target[i]), b = ToFloat(source[i]);
    const float result = op == DPL_REDUCE_MIN   ? std::min(a, b)
                         : op == DPL_REDUCE_MAX ? std::max(a, b)
                                                : a + b;
    target[i] = FromFloat(result);
  }
}

template <typename T>
void DivideTyped(T* data, size_t count, int divisor) {
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<T>(data[i] / static_cast<T>(divisor));
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void Divide16Bit(uint16_t* data, size_t count, int divisor) {
  for (size_t i = 0; i < count; ++i) {
    data[i] = FromFloat(ToFloat(data[i]) / static_cast<float>(divisor));
  }
}

}  // namespace detail

// target[i] = op(target[i], source[i]) for `count` elements of `type`. AVG reduces as SUM (the
// caller divides once at the end with DivideInPlace). PluginError(DPL_ERR_UNSUPPORTED) for an
// element type or operator it does not know.
inline void ReduceInto(ElementType type, dpl_reduce_op op, void* target, const void* source,
                       size_t count) {
  using namespace detail;
  switch (type) {
    case ElementType::kFloat32:
      return ReduceTyped(op, static_cast<float*>(target), static_cast<const float*>(source), count);
    case ElementType::kFloat64:
      return ReduceTyped(op, static_cast<double*>(target), static_cast<const double*>(source),
                         count);
    case ElementType::kInt32:
      return ReduceTyped(op, static_cast<int32_t*>(target), static_cast<const int32_t*>(source),
                         count);
    case ElementType::kInt64:
      return ReduceTyped(op, static_cast<int64_t*>(target), static_cast<const int64_t*>(source),
                         count);
    case ElementType::kInt8:
      return ReduceTyped(op, static_cast<int8_t*>(target), static_cast<const int8_t*>(source),
                         count);
    case ElementType::kUInt8:
      return ReduceTyped(op, static_cast<uint8_t*>(target), static_cast<const uint8_t*>(source),
                         count);
    case ElementType::kFloat16:
      return Reduce16Bit<HalfToFloat, FloatToHalf>(op, static_cast<uint16_t*>(target),
                                                   static_cast<const uint16_t*>(source), count);
    case ElementType::kBFloat16:
      return Reduce16Bit<Bfloat16ToFloat, FloatToBfloat16>(
          op, static_cast<uint16_t*>(target), static_cast<const uint16_t*>(source), count);
    case ElementType::kUnknown:
      break;
  }
  throw PluginError(DPL_ERR_UNSUPPORTED, "no reduction for this element type");
}

// data[i] /= divisor (integers truncate toward zero), for AVG.
inline void DivideInPlace(ElementType type, void* data, size_t count, int divisor) {
  using namespace detail;
  switch (type) {
    case ElementType::kFloat32:
      return DivideTyped(static_cast<float*>(data), count, divisor);
    case ElementType::kFloat64:
      return DivideTyped(static_cast<double*>(data), count, divisor);
    case ElementType::kInt32:
      return DivideTyped(static_cast<int32_t*>(data), count, divisor);
    case ElementType::kInt64:
      return DivideTyped(static_cast<int64_t*>(data), count, divisor);
    case ElementType::kInt8:
      return DivideTyped(static_cast<int8_t*>(data), count, divisor);
    case ElementType::kUInt8:
      return DivideTyped(static_cast<uint8_t*>(data), count, divisor);
    case ElementType::kFloat16:
      return Divide16Bit<HalfToFloat, FloatToHalf>(static_cast<uint16_t*>(data), count, divisor);
    case ElementType::kBFloat16:
      return Divide16Bit<Bfloat16ToFloat, FloatToBfloat16>(static_cast<uint16_t*>(data), count,
                                                           divisor);
    case ElementType::kUnknown:
      break;
  }
  throw PluginError(DPL_ERR_UNSUPPORTED, "no division for this element type");
}

}  // namespace dpl::support

#endif  // DPL_SUPPORT_REDUCE_HPP
