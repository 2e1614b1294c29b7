#include "training/state_dict.hpp"

#include <cstring>

#include "dpl/torch_files/torch_archive.hpp"

namespace dpl::training {

using torch_files::ReadTorchArchive;
using torch_files::TorchDtype;
using torch_files::TorchTensor;
using torch_files::TorchValue;
using torch_files::WriteTorchArchive;

Status WriteParameterStateDict(const std::string& path, const ParameterPlacement& placement) {
  TorchValue::Entries entries;
  for (const HostParameter& p : placement.parameters()) {
    TorchTensor tensor;
    tensor.shape.assign(p.model_value.shape, p.model_value.shape + p.model_value.ndim);
    tensor.data.resize(p.elements * sizeof(float));
    std::memcpy(tensor.data.data(), p.value, tensor.data.size());
    entries.emplace_back(p.name, TorchValue::Tensor(std::move(tensor)));
  }
  return WriteTorchArchive(path, TorchValue::OrderedDict(std::move(entries)));
}

Status ReadParameterStateDict(const std::string& path, ParameterPlacement& placement) {
  DPL_ASSIGN_OR_RETURN(TorchValue root, ReadTorchArchive(path));
  const TorchValue* model = root.Find("model");  // a dpl checkpoint holds one under "model"
  const TorchValue& state = model != nullptr && model->AsDict() ? *model : root;
  if (state.AsDict() == nullptr) {
    return Status::InvalidArgument(path + " holds a " + state.TypeName() +
                                   ", not a state dict of {name: tensor}");
  }
  for (const HostParameter& p : placement.parameters()) {
    const TorchValue* value = state.Find(p.name);
    const TorchTensor* tensor = value ? value->AsTensor() : nullptr;
    if (tensor == nullptr) {
      return Status::InvalidArgument(path + " has no tensor '" + p.name + "'");
    }
    const std::vector<int64_t> shape(p.model_value.shape, p.model_value.shape + p.model_value.ndim);
    if (tensor->dtype != TorchDtype::kFloat32 || tensor->shape != shape) {
      std::string expected, got;
      for (int64_t d : shape) expected += (expected.empty() ? "" : ", ") + std::to_string(d);
      for (int64_t d : tensor->shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
      return Status::InvalidArgument(path + ": tensor '" + p.name + "' is " +
                                     TorchDtypeName(tensor->dtype) + " (" + got +
                                     "), the model expects float32 (" + expected + ")");
    }
    std::memcpy(p.value, tensor->data.data(), p.elements * sizeof(float));
  }
  return placement.ValuesChanged();
}

}  // namespace dpl::training
