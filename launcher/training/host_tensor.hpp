// DLTensors over host memory, and typed pointers to the data of host DLTensors: what the trainer
// and the gradient synchronizer hand to and take from plugins.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>

namespace dpl::training {

// A compact tensor of `ndim` dims (`shape`, borrowed) over host memory at `data`.
inline DLTensor HostTensor(void* data, DLDataType dtype, int32_t ndim, int64_t* shape) {
  DLTensor tensor{};
  tensor.data = data;
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = ndim;
  tensor.dtype = dtype;
  tensor.shape = shape;
  tensor.strides = nullptr;
  tensor.byte_offset = 0;
  return tensor;
}

// Elements of a tensor: the product of its shape.
inline size_t ElementCount(const DLTensor& tensor) {
  size_t count = 1;
  for (int32_t d = 0; d < tensor.ndim; ++d) count *= size_t(tensor.shape[d]);
  return count;
}

// Memory the host can read and write: plain or page-locked (CUDA host) memory.
inline bool InHostMemory(const DLDevice& device) {
  return device.device_type == kDLCPU || device.device_type == kDLCUDAHost;
}

// The first element of a tensor in host memory (byte_offset applied).
template <typename T>
T* HostData(const DLTensor& tensor) {
  return reinterpret_cast<T*>(static_cast<char*>(tensor.data) + tensor.byte_offset);
}

}  // namespace dpl::training
