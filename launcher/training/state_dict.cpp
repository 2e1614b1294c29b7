#include "training/state_dict.hpp"

#include <cstring>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "common/log.hpp"
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

namespace {

// The entries of a state dict that are not the model's parameters (a buffer, which this path does
// not read, or another model's tensor) are named, as the SDK's load_state names what it ignores:
// a file of another model that happens to hold every parameter's name is then seen.
void WarnOfUnreadEntries(const std::string& path, const torch_files::TorchDict& state,
                         const ParameterPlacement& placement) {
  std::set<std::string> parameters;
  for (const HostParameter& p : placement.parameters()) parameters.insert(p.name);
  std::vector<std::string> unread;
  for (const torch_files::TorchDictEntry& entry : state.entries()) {
    const std::string* name = std::get_if<std::string>(&entry.key);
    if (name == nullptr || parameters.count(*name) == 0) {
      unread.push_back(torch_files::TorchDictKeyRepr(entry.key));
    }
  }
  if (unread.empty()) return;
  std::string names;
  for (size_t i = 0; i < unread.size() && i < 5; ++i) names += (i ? ", " : "") + unread[i];
  if (unread.size() > 5) names += ", ...";
  log::Warning(path + " holds " + std::to_string(unread.size()) +
               (unread.size() == 1 ? " entry that is" : " entries that are") +
               " not the model's parameters, not read: " + names +
               " (--init-from reads the parameters of this model; buffers start as the model "
               "makes them)");
}

}  // namespace

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
  WarnOfUnreadEntries(path, *state.AsDict(), placement);
  return placement.ValuesChanged();
}

}  // namespace dpl::training
