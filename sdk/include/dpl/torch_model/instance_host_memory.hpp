// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): what an Instance
// (dpl/torch_model/instance.hpp) moves between the model and the host's memory: the parameters'
// values and gradients (read_tensors, write_tensors, share_parameters, share_gradients), the
// optimizer's state, the buffers, the random state and the state files.
#ifndef DPL_TORCH_MODEL_INSTANCE_HOST_MEMORY_HPP
#define DPL_TORCH_MODEL_INSTANCE_HOST_MEMORY_HPP

#include "dpl/torch_model/instance.hpp"

namespace dpl {
namespace torch_model {
namespace {

inline void Instance::RequireKnownTensors(dpl_model_tensors which) {
  if (which != DPL_MODEL_TENSORS_VALUES && which != DPL_MODEL_TENSORS_GRADIENTS) {
    throw InvalidArgument("unknown tensor set " + std::to_string(static_cast<int>(which)));
  }
}

inline void Instance::ReadTensors(dpl_model_tensors which, float* host, uint64_t count) {
  if (which >= DPL_MODEL_TENSORS_OPTIMIZER_STATE) {
    torch::NoGradGuard no_grad;
    HostState(which, host, count).copy_(OptimizerState(which));
    return;
  }
  RequireKnownTensors(which);
  torch::NoGradGuard no_grad;
  if (which == DPL_MODEL_TENSORS_GRADIENTS) {  // one buffer: one copy (Note [Flat gradients])
    RequireHostCount(host, count);
    torch::from_blob(host, {int64_t(count)}, torch::TensorOptions().dtype(torch::kFloat32))
        .copy_(gradients_.flat());
    return;
  }
  std::vector<torch::Tensor> slices = HostSlices(host, count);
  for (size_t i = 0; i < slices.size(); ++i) slices[i].copy_(Selected(which, i));
}

inline void Instance::WriteTensors(dpl_model_tensors which, const float* host, uint64_t count) {
  if (which >= DPL_MODEL_TENSORS_OPTIMIZER_STATE) {
    torch::NoGradGuard no_grad;
    OptimizerState(which).copy_(HostState(which, const_cast<float*>(host), count));
    return;
  }
  RequireKnownTensors(which);
  std::vector<torch::Tensor> slices = HostSlices(host, count);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < slices.size(); ++i) Selected(which, i).copy_(slices[i]);
}

inline void Instance::RequireSharable(const char* entry, const float* memory,
                                      uint64_t count) const {
  if (!settings_.device.is_cpu() || optimizer_) {
    throw PluginError(DPL_ERR_UNSUPPORTED,
                      std::string(entry) + " takes host memory before any set_optimizer; this " +
                          "model is on " + settings_.device.str() +
                          (optimizer_ ? " with an optimizer" : ""));
  }
  RequireHostCount(memory, count);
}

inline void Instance::ShareParameters(float* values, uint64_t count) {
  RequireSharable("share_parameters", values, count);
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    torch::Tensor& parameter = parameters_[i];
    parameter.set_data(torch::from_blob(values + offset, parameter.sizes(),
                                        torch::TensorOptions().dtype(torch::kFloat32)));
    value_views_[i].tensor.data = parameter.data_ptr();  // the shape the host holds stays
    offset += parameter.numel();
  }
}

inline void Instance::ShareGradients(float* gradients, uint64_t count) {
  RequireSharable("share_gradients", gradients, count);
  gradients_.MoveTo(gradients);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    gradient_views_[i].tensor.data = gradients_.view(i).data_ptr();
  }
}

inline void Instance::ReadBuffers(void* host, uint64_t bytes) {
  torch::NoGradGuard no_grad;
  for (auto& [slice, buffer] : BufferSlices(host, bytes)) slice.copy_(buffer);
}

inline void Instance::WriteBuffers(const void* host, uint64_t bytes) {
  torch::NoGradGuard no_grad;
  for (auto& [slice, buffer] : BufferSlices(const_cast<void*>(host), bytes)) buffer.copy_(slice);
}

inline void Instance::RngState(void* state, uint64_t capacity, uint64_t* size) const {
  RequireNotNull(size, "size");
  const std::vector<uint8_t> bytes = CaptureRngState(settings_.device);
  *size = bytes.size();
  if (capacity < bytes.size()) {
    throw PluginError(DPL_ERR_BUFFER_TOO_SMALL,
                      "the rng state needs " + std::to_string(bytes.size()) +
                          " bytes, the buffer holds " + std::to_string(capacity));
  }
  RequireNotNull(state, "state");
  std::memcpy(state, bytes.data(), bytes.size());
}

inline void Instance::SetRngState(const void* state, uint64_t size) const {
  RestoreRngState(settings_.device, state, size);
}

inline void Instance::SaveState(const std::string& path, uint32_t abi_version) {
  if (abi_version >= 3) {
    network_->Save(path);
    return;
  }
  WriteLegacyArchive(path, settings_.model_name, network_->NamedParameters(),
                     network_->NamedBuffers());
}

inline void Instance::LoadState(const std::string& path) {
  const std::string prefix = "state file " + path;
  StateFile file = ReadStateFile(path, prefix);
  if (file.writer && *file.writer != settings_.model_name) {
    throw InvalidArgument(prefix + " was not saved by this model (\"" + settings_.model_name +
                          "\")");
  }
  const std::vector<std::string> ignored = network_->Load(file.tensors, prefix);
  if (!ignored.empty()) {
    std::string names;
    for (const auto& name : ignored) names += (names.empty() ? "" : ", ") + name;
    Log(DPL_LOG_WARNING, prefix + " holds " + std::to_string(ignored.size()) +
                             " tensors this model does not have, ignored: " + names);
  }
}

inline std::vector<torch::Tensor> Instance::HostSlices(const float* host, uint64_t count) const {
  RequireHostCount(host, count);
  std::vector<torch::Tensor> slices;
  int64_t offset = 0;
  for (const auto& parameter : parameters_) {
    slices.push_back(torch::from_blob(const_cast<float*>(host) + offset, parameter.sizes(),
                                      torch::TensorOptions().dtype(torch::kFloat32)));
    offset += parameter.numel();
  }
  return slices;
}

inline void Instance::RequireHostCount(const float* host, uint64_t count) const {
  RequireNotNull(host, "host");
  uint64_t total = 0;
  for (const auto& parameter : parameters_) total += uint64_t(parameter.numel());
  if (count != total) {
    throw InvalidArgument("the host buffer holds " + std::to_string(count) +
                          " floats, the parameters " + std::to_string(total));
  }
}

inline std::vector<std::pair<torch::Tensor, torch::Tensor>> Instance::BufferSlices(
    void* host, uint64_t bytes) const {
  uint64_t total = 0;
  for (const auto& buffer : buffers_) total += buffer.nbytes();
  if (bytes != total) {
    throw InvalidArgument("the host buffer holds " + std::to_string(bytes) +
                          " bytes, the buffers " + std::to_string(total));
  }
  if (total > 0) RequireNotNull(host, "host");
  std::vector<std::pair<torch::Tensor, torch::Tensor>> slices;
  uint64_t offset = 0;
  for (const auto& buffer : buffers_) {
    slices.emplace_back(torch::from_blob(static_cast<char*>(host) + offset, buffer.sizes(),
                                         torch::TensorOptions().dtype(buffer.scalar_type())),
                        buffer);
    offset += buffer.nbytes();
  }
  return slices;
}

inline DeviceOptimizer& Instance::RequireOptimizer() const {
  if (!optimizer_) {
    throw InvalidArgument("no optimizer yet; call set_optimizer first");
  }
  return *optimizer_;
}

inline torch::Tensor& Instance::OptimizerState(dpl_model_tensors which) const {
  return RequireOptimizer().State(size_t(which) - DPL_MODEL_TENSORS_OPTIMIZER_STATE);
}

inline torch::Tensor Instance::HostState(dpl_model_tensors which, float* host,
                                         uint64_t count) const {
  RequireNotNull(host, "host");
  const int64_t elements = OptimizerState(which).numel();
  if (count != uint64_t(elements)) {
    throw InvalidArgument("the host buffer holds " + std::to_string(count) +
                          " floats, the optimizer's state " + std::to_string(elements));
  }
  return torch::from_blob(host, {elements}, torch::TensorOptions().dtype(torch::kFloat32));
}

inline torch::Tensor Instance::Selected(dpl_model_tensors which, size_t index) {
  return which == DPL_MODEL_TENSORS_VALUES ? parameters_[index] : gradients_.view(index);
}

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_INSTANCE_HOST_MEMORY_HPP
