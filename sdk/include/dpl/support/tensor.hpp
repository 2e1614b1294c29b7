// dpl SDK, C++ plugin support: DLPack tensors as plugins check and address them. Failed checks
// throw PluginError (dpl/support/error.hpp) naming the argument (`what`) and the problem.
#ifndef DPL_SUPPORT_TENSOR_HPP
#define DPL_SUPPORT_TENSOR_HPP

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "dpl/support/error.hpp"

namespace dpl::support {

// The element types plugins reduce and convert; kUnknown for any other DLPack dtype.
enum class ElementType {
  kUnknown,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kInt32,
  kInt64,
  kUInt8,
  kInt8
};

inline ElementType ElementTypeOf(const DLDataType& dtype) {
  if (dtype.lanes != 1) return ElementType::kUnknown;
  switch (dtype.code) {
    case kDLFloat:
      if (dtype.bits == 16) return ElementType::kFloat16;
      if (dtype.bits == 32) return ElementType::kFloat32;
      if (dtype.bits == 64) return ElementType::kFloat64;
      break;
    case kDLBfloat:
      if (dtype.bits == 16) return ElementType::kBFloat16;
      break;
    case kDLInt:
      if (dtype.bits == 8) return ElementType::kInt8;
      if (dtype.bits == 32) return ElementType::kInt32;
      if (dtype.bits == 64) return ElementType::kInt64;
      break;
    case kDLUInt:
      if (dtype.bits == 8) return ElementType::kUInt8;
      break;
    default:
      break;
  }
  return ElementType::kUnknown;
}

// A DLPack dtype's name for messages, e.g. "float32", "bfloat16", "complex64", "int8x4".
inline std::string DtypeName(const DLDataType& dtype) {
  std::string base;
  switch (dtype.code) {
    case kDLInt:
      base = "int";
      break;
    case kDLUInt:
      base = "uint";
      break;
    case kDLFloat:
      base = "float";
      break;
    case kDLBfloat:
      base = "bfloat";
      break;
    case kDLComplex:
      base = "complex";
      break;
    case kDLOpaqueHandle:
      base = "opaque";
      break;
    default:
      base = "dtype_code" + std::to_string(dtype.code) + "_";
      break;
  }
  std::string name = base + std::to_string(dtype.bits);
  if (dtype.lanes != 1) name += "x" + std::to_string(dtype.lanes);
  return name;
}

// Elements of a tensor: the product of its shape (1 for a 0-d tensor).
inline int64_t ElementCount(const DLTensor& tensor) {
  int64_t count = 1;
  for (int32_t d = 0; d < tensor.ndim; ++d) count *= tensor.shape[d];
  return count;
}

// Bytes per element: bits rounded up to bytes, times lanes.
inline size_t ElementSize(const DLDataType& dtype) {
  return static_cast<size_t>((dtype.bits + 7) / 8) * dtype.lanes;
}

inline size_t ByteCount(const DLTensor& tensor) {
  return static_cast<size_t>(ElementCount(tensor)) * ElementSize(tensor.dtype);
}

// The first byte of the tensor's data (data + byte_offset).
inline void* DataPointer(const DLTensor& tensor) {
  return static_cast<char*>(tensor.data) + tensor.byte_offset;
}

// Memory the host can read and write: plain or page-locked (CUDA host) memory.
inline bool InHostMemory(const DLDevice& device) {
  return device.device_type == kDLCPU || device.device_type == kDLCUDAHost;
}

// Refuses a tensor that is not dense row-major, has a negative extent, or no data when non-empty.
inline void CheckContiguous(const DLTensor& tensor, const std::string& what) {
  if (tensor.ndim < 0 || (tensor.ndim > 0 && tensor.shape == nullptr)) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, what + " has no shape");
  }
  for (int32_t d = 0; d < tensor.ndim; ++d) {
    if (tensor.shape[d] < 0) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, what + " has a negative extent");
    }
  }
  if (tensor.strides != nullptr) {
    int64_t expected = 1;
    for (int32_t d = tensor.ndim - 1; d >= 0; --d) {
      if (tensor.shape[d] != 1 && tensor.strides[d] != expected) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          what +
                              " is not contiguous; pass a dense row-major tensor (call "
                              ".contiguous() first)");
      }
      expected *= tensor.shape[d];
    }
  }
  if (ElementCount(tensor) > 0 && tensor.data == nullptr) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, what + " has no data pointer");
  }
}

}  // namespace dpl::support

#endif  // DPL_SUPPORT_TENSOR_HPP
