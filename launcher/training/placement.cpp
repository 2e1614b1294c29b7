#include "training/placement.hpp"

#include "common/log.hpp"
#include "training/host_tensor.hpp"

namespace dpl::training {
namespace {

constexpr DLDataType kFloat32{kDLFloat, 32, 1};

}  // namespace

// Note [Sharding by default]: a CPU model updated in place on one machine whose workers sum
// through its shared memory trains sharded unless told otherwise. There the workers compute with
// the machine's one copy of the parameters and each updates its part in place (Note [Shared
// parameters]), so sharding gathers nothing: the optimizer's time and state halve at two workers,
// and the sweep of docs/performance.md measured it the faster 2 x 1 at every size with the least
// memory (the ConvNet and the GPT unchanged or faster). The bits are the same either way.
// Elsewhere (across machines, through the backend, a host copy) sharding adds a gather and was not
// measured faster, so it is asked for by --shard-optimizer on. So too in a job that regroups in
// place (Note [Shrink in place] in live_state.hpp): its workers compute with values of their own,
// not the machine's one copy, which an abort of the step could leave half written
// (ReduceInPlace in reducer.cpp), and sharding would gather the parts.
bool ParameterPlacement::ShardsOptimizer(OptimizerSharding sharding,
                                         const PlacementSettings& settings) {
  if (sharding != OptimizerSharding::kAuto) return sharding == OptimizerSharding::kOn;
  return !UsesHostCopy(settings) && AsksSharedMemorySums(settings) &&
         settings.local.machines == 1 && !settings.keeps_live_state;
}

Status ParameterPlacement::CheckSupported(const ModelPlugin& plugin,
                                          const PlacementSettings& settings) {
  const bool host_copy = UsesHostCopy(settings);
  if (!host_copy && settings.offload_optimizer) {
    return Status::InvalidArgument(
        "--offload-optimizer moves the optimizer of a device model (--device cuda, or "
        "--mirror-parameters) into host memory; a CPU model's optimizer runs there already: drop "
        "--offload-optimizer");
  }
  if (host_copy && settings.shard_optimizer) {
    return Status::InvalidArgument(
        "--shard-optimizer splits the optimizer of a CPU model that updates its parameters in "
        "place; it does not take --device cuda or --mirror-parameters: drop --shard-optimizer");
  }
  if (!host_copy || plugin.table->Has(ModelCapability::kHostCopy)) return Status::Ok();
  return Status::InvalidArgument(
      ModelAbiText(plugin,
                   "trains on the CPU with its parameters updated in place; rebuild it "
                   "against the dpl SDK (") +
      plugin_host::FirstAbiWith(ModelCapability::kHostCopy) + ") for " +
      (settings.device == Device::kCuda ? std::string("--device cuda")
                                        : std::string("--mirror-parameters")));
}

std::vector<DLTensor> ParameterPlacement::SummedGradients() const {
  std::vector<DLTensor> tensors;
  for (const HostParameter& p : parameters_) tensors.push_back(p.model_gradient);
  return tensors;
}

Status ParameterPlacement::BroadcastBuffers(Collectives& collectives) {
  if (buffers_.empty()) return Status::Ok();
  std::vector<DLTensor> tensors;
  uint64_t bytes = 0;
  for (const BufferInfo& buffer : buffers_) {
    tensors.push_back(buffer.value);
    bytes += buffer.bytes;
  }
  return collectives.BroadcastTensors(tensors, 0, model_.info().stream,
                                      {"broadcast", -1, 0, bytes});
}

Status ParameterPlacement::ListParameters() {
  DPL_ASSIGN_OR_RETURN(buffers_, ListBuffers(model_));
  for (uint32_t i = 0; i < model_.info().parameter_count; ++i) {
    dpl_parameter p{};
    DPL_RETURN_IF_ERROR(model_.Parameter(i, &p));
    const bool float32 = p.value.dtype.code == kDLFloat && p.value.dtype.bits == 32 &&
                         p.gradient.dtype.code == kDLFloat && p.gradient.dtype.bits == 32;
    const bool same_place = p.value.device.device_type == p.gradient.device.device_type &&
                            p.value.device.device_id == p.gradient.device.device_id;
    if (!float32 || !same_place || ElementCount(p.value) != ElementCount(p.gradient)) {
      return Status::InvalidArgument(
          "model '" + model_.name() + "': parameter " + std::to_string(i) + " (" +
          (p.name ? p.name : "?") +
          ") is not a float32 tensor with a gradient of the same size and place");
    }
    HostParameter parameter;
    parameter.name = p.name ? p.name : "";
    parameter.elements = ElementCount(p.value);
    parameter.model_value = p.value;
    parameter.model_gradient = p.gradient;
    parameters_.push_back(parameter);
  }
  return Status::Ok();
}

size_t ParameterPlacement::total_elements() const {
  size_t total = 0;
  for (const HostParameter& p : parameters_) total += p.elements;
  return total;
}

Status ParameterPlacement::BroadcastOnModel(Collectives& collectives) {
  std::vector<DLTensor> tensors;
  for (const HostParameter& p : parameters_) tensors.push_back(p.model_value);
  return collectives.BroadcastTensors(tensors, 0, model_.info().stream,
                                      {"broadcast", -1, 0, total_elements() * sizeof(float)});
}

void ParameterPlacement::ScaleGradients(float factor) {
  if (factor == 1.0f) return;
  for (HostParameter& p : parameters_) {
    for (size_t i = 0; i < p.elements; ++i) p.gradient[i] *= factor;
  }
}

Result<std::unique_ptr<InPlacePlacement>> InPlacePlacement::Create(Model& model) {
  std::unique_ptr<InPlacePlacement> placement(new InPlacePlacement(model));
  DPL_RETURN_IF_ERROR(placement->ListParameters());
  for (HostParameter& p : placement->parameters_) {
    p.value = HostData<float>(p.model_value);
    p.gradient = HostData<float>(p.model_gradient);
  }
  return placement;
}

Result<float> InPlacePlacement::TakeGradients(float factor, StepProfile* /*profile*/) {
  ScaleGradients(factor);
  return 1.0f;
}

void InPlacePlacement::MoveValuesTo(float* values) {
  for (HostParameter& p : parameters_) {
    p.value = values;
    p.model_value.data = values;
    values += p.elements;
  }
}

void InPlacePlacement::MoveGradientsTo(float* gradients) {
  for (HostParameter& p : parameters_) {
    p.gradient = gradients;
    p.model_gradient.data = gradients;
    gradients += p.elements;
  }
}

Result<std::unique_ptr<HostCopyPlacement>> HostCopyPlacement::Create(Model& model, int rank) {
  std::unique_ptr<HostCopyPlacement> placement(new HostCopyPlacement(model));
  DPL_RETURN_IF_ERROR(placement->Setup(rank));
  return placement;
}

Status HostCopyPlacement::Setup(int rank) {
  DPL_RETURN_IF_ERROR(ListParameters());
  host_values_.assign(total_elements(), 0.0f);
  host_gradients_.assign(total_elements(), 0.0f);
  size_t offset = 0;
  for (HostParameter& p : parameters_) {
    p.value = host_values_.data() + offset;
    p.gradient = host_gradients_.data() + offset;
    offset += p.elements;
  }
  if (rank == 0) {
    log::Info("the optimizer updates a host copy of the " + std::to_string(total_elements()) +
              " parameters and writes it to the model every step");
  }
  return Status::Ok();
}

Status HostCopyPlacement::BroadcastValues(Collectives& collectives) {
  DPL_RETURN_IF_ERROR(BroadcastOnModel(collectives));
  return ReadFromModel(DPL_MODEL_TENSORS_VALUES);
}

Result<float> HostCopyPlacement::TakeGradients(float factor, StepProfile* profile) {
  DPL_RETURN_IF_ERROR(ReadFromModel(DPL_MODEL_TENSORS_GRADIENTS));
  profile->Lap(StepPhase::kCopies);
  ScaleGradients(factor);
  return 1.0f;
}

Status HostCopyPlacement::Publish(StepProfile* profile) {
  DPL_RETURN_IF_ERROR(WriteValues());
  profile->Lap(StepPhase::kCopies);
  return Status::Ok();
}

Status HostCopyPlacement::ReadFromModel(dpl_model_tensors which) {
  std::vector<float>& host = which == DPL_MODEL_TENSORS_VALUES ? host_values_ : host_gradients_;
  return model_.ReadTensors(which, host.data(), uint64_t(host.size()));
}

Status HostCopyPlacement::WriteValues() {
  return model_.WriteTensors(DPL_MODEL_TENSORS_VALUES, host_values_.data(),
                             uint64_t(host_values_.size()));
}

Result<std::unique_ptr<HostSumsPlacement>> HostSumsPlacement::Create(Model& model, int rank) {
  std::unique_ptr<HostSumsPlacement> placement(new HostSumsPlacement(model));
  DPL_RETURN_IF_ERROR(placement->Setup(rank));
  for (const HostParameter& p : placement->parameters_) {
    placement->shapes_.push_back(int64_t(p.elements));
  }
  return placement;
}

std::vector<DLTensor> HostSumsPlacement::SummedGradients() const {
  std::vector<DLTensor> tensors;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    tensors.push_back(
        HostTensor(parameters_[i].gradient, kFloat32, 1, const_cast<int64_t*>(&shapes_[i])));
  }
  return tensors;
}

Status HostSumsPlacement::BroadcastValues(Collectives& collectives) {
  DPL_RETURN_IF_ERROR(ReadFromModel(DPL_MODEL_TENSORS_VALUES));
  int64_t shape[1] = {int64_t(host_values_.size())};
  DLTensor values = HostTensor(host_values_.data(), kFloat32, 1, shape);
  DPL_RETURN_IF_ERROR(collectives.BroadcastTensors(
      {values}, 0, nullptr, {"broadcast", -1, 0, host_values_.size() * sizeof(float)}));
  return WriteValues();
}

Status HostSumsPlacement::BroadcastBuffers(Collectives& collectives) {
  size_t total = 0;
  for (const BufferInfo& buffer : buffers_) total += buffer.bytes;
  if (total == 0) return Status::Ok();
  std::vector<uint8_t> bytes(total);
  DPL_RETURN_IF_ERROR(model_.ReadBuffers(bytes.data(), bytes.size()));
  int64_t shape[1] = {int64_t(total)};
  DLTensor tensor = HostTensor(bytes.data(), DLDataType{kDLUInt, 8, 1}, 1, shape);
  DPL_RETURN_IF_ERROR(
      collectives.BroadcastTensors({tensor}, 0, nullptr, {"broadcast", -1, 0, uint64_t(total)}));
  return model_.WriteBuffers(bytes.data(), bytes.size());
}

Result<std::unique_ptr<DeviceValuesPlacement>> DeviceValuesPlacement::Create(Model& model) {
  std::unique_ptr<DeviceValuesPlacement> placement(new DeviceValuesPlacement(model));
  DPL_RETURN_IF_ERROR(placement->ListParameters());
  placement->host_values_.assign(placement->total_elements(), 0.0f);
  size_t offset = 0;
  for (HostParameter& p : placement->parameters_) {
    p.value = placement->host_values_.data() + offset;
    offset += p.elements;
  }
  return placement;
}

Status DeviceValuesPlacement::ValuesChanged() {
  return model_.WriteTensors(DPL_MODEL_TENSORS_VALUES, host_values_.data(),
                             uint64_t(host_values_.size()));
}

Status DeviceValuesPlacement::RefreshHostValues() {
  return model_.ReadTensors(DPL_MODEL_TENSORS_VALUES, host_values_.data(),
                            uint64_t(host_values_.size()));
}

}  // namespace dpl::training
