// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): libtorch tensors as the
// DLPack DLTensors the model ABI hands to the host.
#ifndef DPL_TORCH_MODEL_TENSOR_VIEW_HPP
#define DPL_TORCH_MODEL_TENSOR_VIEW_HPP

#include <dlpack/dlpack.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dpl/support/tensor.hpp"
#include "dpl/torch_model/errors.hpp"

namespace dpl {
namespace torch_model {
namespace {

// The DLPack dtype of a libtorch scalar type, as torch.utils.dlpack names it (bool is uint8, the
// DLPack version of this SDK has no boolean code).
inline DLDataType DlpackType(c10::ScalarType type) {
  DLDataType dtype{};
  dtype.lanes = 1;
  dtype.bits = static_cast<uint8_t>(c10::elementSize(type) * 8);
  switch (type) {
    case c10::kFloat:
    case c10::kDouble:
    case c10::kHalf:
      dtype.code = kDLFloat;
      break;
    case c10::kBFloat16:
      dtype.code = kDLBfloat;
      break;
    case c10::kLong:
    case c10::kInt:
    case c10::kShort:
    case c10::kChar:
      dtype.code = kDLInt;
      break;
    case c10::kByte:
    case c10::kBool:
      dtype.code = kDLUInt;
      break;
    default:
      throw PluginError(DPL_ERR_UNSUPPORTED, std::string("tensors of type ") + c10::toString(type) +
                                                 " cannot cross the model ABI (no DLPack type)");
  }
  return dtype;
}

// The libtorch scalar type of a DLPack dtype the model ABI carries (dpl/support/tensor.hpp's
// element types).
inline c10::ScalarType ScalarTypeOf(const DLDataType& dtype) {
  switch (support::ElementTypeOf(dtype)) {
    case support::ElementType::kFloat16:
      return c10::kHalf;
    case support::ElementType::kBFloat16:
      return c10::kBFloat16;
    case support::ElementType::kFloat32:
      return c10::kFloat;
    case support::ElementType::kFloat64:
      return c10::kDouble;
    case support::ElementType::kInt32:
      return c10::kInt;
    case support::ElementType::kInt64:
      return c10::kLong;
    case support::ElementType::kUInt8:
      return c10::kByte;
    case support::ElementType::kInt8:
      return c10::kChar;
    case support::ElementType::kUnknown:
      break;
  }
  throw PluginError(DPL_ERR_UNSUPPORTED,
                    "tensors of dtype " + support::DtypeName(dtype) + " have no libtorch type");
}

// A tensor's DLTensor view with its own copy of the shape, valid as long as the tensor's storage.
struct TensorView {
  std::vector<int64_t> shape;
  DLTensor tensor{};

  // `page_locked`: host memory from the CUDA host allocator (kDLCUDAHost).
  void Bind(const torch::Tensor& source, bool page_locked = false) {
    shape = source.sizes().vec();
    tensor.data = source.data_ptr();
    tensor.device.device_type = source.is_cuda() ? kDLCUDA : page_locked ? kDLCUDAHost : kDLCPU;
    tensor.device.device_id = source.is_cuda() ? source.get_device() : 0;
    tensor.ndim = static_cast<int32_t>(shape.size());
    tensor.dtype = DlpackType(source.scalar_type());
    tensor.shape = shape.data();
    tensor.strides = nullptr;  // compact row-major
    tensor.byte_offset = 0;
  }
};

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_TENSOR_VIEW_HPP
