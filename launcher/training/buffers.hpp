// A model's buffers (ModelCapability::kBuffers): state that is not trained by gradients, such as
// BatchNorm's running statistics, listed by name with their element type and shape.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "dpl/torch_files/torch_value.hpp"
#include "training/model.hpp"

namespace dpl::training {

struct BufferInfo {
  std::string name;
  DLTensor value{};  // on the model's device
  std::vector<int64_t> shape;
  size_t bytes = 0;
};

// Every buffer of `model`, in index order; none for a model without kBuffers.
Result<std::vector<BufferInfo>> ListBuffers(const Model& model);

// Writes the buffers' bytes back to back, in buffer order, to `path` (nothing for a model without
// buffers).
Status WriteBufferBytes(Model& model, const std::string& path);

// The torch dtype of a DLPack dtype, or an error naming it.
Result<torch_files::TorchDtype> TorchDtypeOfDl(const DLDataType& dtype, const std::string& what);

}  // namespace dpl::training
