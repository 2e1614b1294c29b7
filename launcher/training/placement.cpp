#include "training/placement.hpp"

#include "common/log.hpp"
#include "training/host_tensor.hpp"
#include "training/shard.hpp"

namespace dpl::training {
namespace {

// A CPU model with a host backend, no mirror: the optimizer updates the model's own memory, whose
// gradients are summed in buckets while backward runs and scaled there.
class InPlacePlacement final : public ParameterPlacement {
 public:
  using ParameterPlacement::ParameterPlacement;

  Status Setup() {
    DPL_RETURN_IF_ERROR(ListParameters());
    UseModelMemory();
    ViewWholeParameters();
    if (backend_ == nullptr) return Status::Ok();
    std::vector<DLTensor> tensors;
    for (const HostParameter& p : parameters_) tensors.push_back(p.model_gradient);
    if (UsesSharedMemory()) return StartSharedMemory(std::move(tensors));
    if (settings_.shard_optimizer) return StartBackendShard(std::move(tensors));
    return StartSynchronizer(std::move(tensors), GradientScaling::kInBucket, /*callbacks=*/true);
  }
  Status BroadcastInitialValues() override { return BroadcastOnModel(); }
  Status FinishGradients(const Status& step, float scale, StepProfile* profile) override {
    DPL_RETURN_IF_ERROR(FinishSynchronizer(step));
    profile->Lap(StepPhase::kCommunicationWait);
    if (!sync_) ScaleGradients(scale);
    return Status::Ok();
  }
  Status PublishValues(StepProfile* profile) override {
    if (exchange_) {
      DPL_RETURN_IF_ERROR(GatherUpdatedParts());
      profile->Lap(StepPhase::kCommunicationWait);
    }
    // The shared-memory sums may have left the model's gradients zero (Note [Reduction through
    // shared memory], step 1).
    if (!reducer_ || !reducer_->zeroes_gradients()) DPL_RETURN_IF_ERROR(model_.ZeroGradients());
    profile->Lap(StepPhase::kOptimizer);
    return Status::Ok();
  }
  Status ValuesChanged() override { return Status::Ok(); }
};

// A device model with a host backend: after backward the gradients are read into the host copy
// and summed there; the new values are written back after the optimizer.
class HostCopyPlacement final : public ParameterPlacement {
 public:
  using ParameterPlacement::ParameterPlacement;

  Status Setup() {
    DPL_RETURN_IF_ERROR(ListParameters());
    UseHostCopy();
    ViewWholeParameters();
    std::vector<DLTensor> tensors;
    host_gradient_shapes_.resize(parameters_.size());
    for (size_t i = 0; i < parameters_.size(); ++i) {
      host_gradient_shapes_[i] = int64_t(parameters_[i].elements);
      tensors.push_back(HostTensor(parameters_[i].gradient, DLDataType{kDLFloat, 32, 1}, 1,
                                   &host_gradient_shapes_[i]));
    }
    // The host copy is filled after backward, so no callbacks: FinishStep launches every bucket.
    return StartSynchronizer(std::move(tensors), GradientScaling::kInBucket, /*callbacks=*/false);
  }
  Status BroadcastInitialValues() override {
    DPL_RETURN_IF_ERROR(ReadFromModel(DPL_MODEL_TENSORS_VALUES));
    if (!comm_) return Status::Ok();
    int64_t shape[1] = {int64_t(host_values_.size())};
    DLTensor values = HostTensor(host_values_.data(), DLDataType{kDLFloat, 32, 1}, 1, shape);
    DPL_RETURN_IF_ERROR(
        comm_
            ->Submit([this, &values] { return backend_->Broadcast(&values, 0, nullptr); },
                     {"broadcast", -1, 0, host_values_.size() * sizeof(float)})
            .get());
    return WriteValuesToModel();
  }
  Status FinishGradients(const Status& step, float /*scale*/, StepProfile* profile) override {
    Status read = step;
    if (read.ok()) read = ReadFromModel(DPL_MODEL_TENSORS_GRADIENTS);
    profile->Lap(StepPhase::kCopies);
    DPL_RETURN_IF_ERROR(FinishSynchronizer(read));
    profile->Lap(StepPhase::kCommunicationWait);
    return Status::Ok();
  }
  Status PublishValues(StepProfile* profile) override { return PublishHostCopy(profile); }
  Status ValuesChanged() override { return WriteValuesToModel(); }

 protected:
  Status BroadcastBuffers() override {
    size_t total = 0;
    for (const BufferInfo& buffer : buffers_) total += buffer.bytes;
    if (!comm_ || total == 0) return Status::Ok();
    std::vector<uint8_t> bytes(total);
    DPL_RETURN_IF_ERROR(model_.ReadBuffers(bytes.data(), bytes.size()));
    int64_t shape[1] = {int64_t(total)};
    DLTensor tensor = HostTensor(bytes.data(), DLDataType{kDLUInt, 8, 1}, 1, shape);
    DPL_RETURN_IF_ERROR(
        comm_->Submit([this, &tensor] { return backend_->Broadcast(&tensor, 0, nullptr); }).get());
    return model_.WriteBuffers(bytes.data(), bytes.size());
  }
};

// The backend reaches the model's memory but the optimizer runs on a host copy (a device model
// with a device backend, or --mirror-parameters, where the model runs no optimizer of its own or
// --offload-optimizer asks for the host's): the model's gradients are summed in buckets
// while backward runs, then read into the host copy and scaled there (the host never touches
// device memory).
class ModelCollectivesPlacement final : public ParameterPlacement {
 public:
  using ParameterPlacement::ParameterPlacement;

  Status Setup() {
    DPL_RETURN_IF_ERROR(ListParameters());
    UseHostCopy();
    ViewWholeParameters();
    if (backend_ == nullptr) return Status::Ok();
    return StartModelSynchronizer();
  }
  Status BroadcastInitialValues() override {
    DPL_RETURN_IF_ERROR(BroadcastOnModel());
    return ReadFromModel(DPL_MODEL_TENSORS_VALUES);
  }
  Status FinishGradients(const Status& step, float scale, StepProfile* profile) override {
    DPL_RETURN_IF_ERROR(FinishSynchronizer(step));
    profile->Lap(StepPhase::kCommunicationWait);
    DPL_RETURN_IF_ERROR(ReadFromModel(DPL_MODEL_TENSORS_GRADIENTS));
    profile->Lap(StepPhase::kCopies);
    ScaleGradients(scale);
    return Status::Ok();
  }
  Status PublishValues(StepProfile* profile) override { return PublishHostCopy(profile); }
  Status ValuesChanged() override { return WriteValuesToModel(); }
};

// The model's own optimizer updates its parameters where they are (Note [Device optimizer
// placement] in parameter_update.hpp): the gradients are summed on the model's tensors while
// backward runs, as ModelCollectivesPlacement sums them, and nothing is copied to the host per
// step. The host values are read from the model only when something reads them.
class DeviceOptimizerPlacement final : public ParameterPlacement {
 public:
  using ParameterPlacement::ParameterPlacement;

  Status Setup() {
    DPL_RETURN_IF_ERROR(ListParameters());
    UseHostValues();
    ViewWholeParameters();
    view_.device_model = &model_;
    if (backend_ == nullptr) return Status::Ok();
    return StartModelSynchronizer();
  }
  Status BroadcastInitialValues() override { return BroadcastOnModel(); }
  Status FinishGradients(const Status& step, float scale, StepProfile* profile) override {
    DPL_RETURN_IF_ERROR(FinishSynchronizer(step));
    profile->Lap(StepPhase::kCommunicationWait);
    view_.gradient_scale = scale;  // the model's update applies it
    return Status::Ok();
  }
  Status PublishValues(StepProfile* profile) override {
    DPL_RETURN_IF_ERROR(model_.ZeroGradients());
    profile->Lap(StepPhase::kOptimizer);
    return Status::Ok();
  }
  Status ValuesChanged() override { return WriteValuesToModel(); }
  Status RefreshHostValues() override { return ReadFromModel(DPL_MODEL_TENSORS_VALUES); }
};

template <typename Strategy>
Result<std::unique_ptr<ParameterPlacement>> Build(Model& model, Backend* backend,
                                                  const PlacementSettings& settings) {
  auto strategy = std::make_unique<Strategy>(model, backend, settings);
  DPL_RETURN_IF_ERROR(strategy->Setup());
  return std::unique_ptr<ParameterPlacement>(std::move(strategy));
}

}  // namespace

ParameterPlacement::ParameterPlacement(Model& model, Backend* backend,
                                       const PlacementSettings& settings)
    : model_(model), backend_(backend), settings_(settings) {}

ParameterPlacement::~ParameterPlacement() = default;

Result<std::unique_ptr<ParameterPlacement>> ParameterPlacement::Create(
    Model& model, Backend* backend, const PlacementSettings& settings) {
  // The model's memory decides whether a host copy is needed; the backend's whether the sums can
  // be made on the model's own tensors. Parameters share one device, so the first one tells.
  dpl_parameter first{};
  const bool has_parameters = model.info().parameter_count > 0;
  if (has_parameters) DPL_RETURN_IF_ERROR(model.Parameter(0, &first));
  const DLDevice device = has_parameters ? first.value.device : DLDevice{kDLCPU, 0};
  const bool host_model = InHostMemory(device);
  if (host_model && !settings.mirror_parameters) {
    return Build<InPlacePlacement>(model, backend, settings);
  }
  DPL_RETURN_IF_ERROR(CheckSupported(model.plugin(), settings));
  const bool backend_reaches_model =
      backend == nullptr || (host_model ? backend->device_type() == kDLCPU
                                        : backend->device_type() == device.device_type);
  if (backend_reaches_model && model.HasDeviceOptimizer() && !settings.offload_optimizer) {
    if (settings.rank == 0) {
      log::Info(
          "the optimizer runs in the model, where its parameters are; --offload-optimizer "
          "runs it in host memory instead");
    }
    return Build<DeviceOptimizerPlacement>(model, backend, settings);
  }
  if (!settings.offload_optimizer && settings.rank == 0) {
    log::Info(model.HasDeviceOptimizer()
                  ? "the optimizer runs in host memory: backend '" + backend->name() +
                        "' sums the gradients there, not on the model's device"
                  : "the optimizer runs in host memory: model '" + model.name() +
                        "' does not run one where its parameters are");
  }
  if (backend_reaches_model) {
    return Build<ModelCollectivesPlacement>(model, backend, settings);
  }
  return Build<HostCopyPlacement>(model, backend, settings);
}

// Note [Sharding by default]: a CPU model updated in place on one machine whose workers sum
// through its shared memory trains sharded unless told otherwise. There the workers compute with
// the machine's one copy of the parameters and each updates its part in place (Note [Shared
// parameters]), so sharding gathers nothing: the optimizer's time and state halve at two workers,
// and the sweep of docs/performance.md measured it the faster 2 x 1 at every size with the least
// memory (the ConvNet and the GPT unchanged or faster). The bits are the same either way.
// Elsewhere (across machines, through the backend, a host copy) sharding adds a gather and was not
// measured faster, so it is asked for by --shard-optimizer on.
bool ParameterPlacement::ShardsOptimizer(OptimizerSharding sharding,
                                         const PlacementSettings& settings) {
  if (sharding != OptimizerSharding::kAuto) return sharding == OptimizerSharding::kOn;
  return !UsesHostCopy(settings) && AsksSharedMemorySums(settings) && settings.local.machines == 1;
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

Status ParameterPlacement::RunCollective(std::function<Status()> call,
                                         const observability::CollectiveActivity& activity) {
  if (!comm_) return Status::Error("no backend to run a collective on (world size 1)");
  return comm_->Submit(std::move(call), activity).get();
}

Status ParameterPlacement::BroadcastInitialState() {
  DPL_RETURN_IF_ERROR(BroadcastInitialValues());
  return BroadcastBuffers();
}

Status ParameterPlacement::BeforeForward() {
  if ((model_.info().flags & DPL_MODEL_BROADCAST_BUFFERS) == 0) return Status::Ok();
  return BroadcastBuffers();
}

Status ParameterPlacement::BroadcastBuffers() {
  if (!comm_ || buffers_.empty()) return Status::Ok();
  return comm_
      ->Submit([this] {
        for (BufferInfo& buffer : buffers_) {
          DPL_RETURN_IF_ERROR(backend_->Broadcast(&buffer.value, 0, model_.info().stream));
        }
        return backend_->Synchronize(model_.info().stream);
      })
      .get();
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
    total_elements_ += parameter.elements;
    parameters_.push_back(parameter);
  }
  return Status::Ok();
}

void ParameterPlacement::UseModelMemory() {
  for (HostParameter& p : parameters_) {
    p.value = HostData<float>(p.model_value);
    p.gradient = HostData<float>(p.model_gradient);
    values_.push_back(p.value);
    gradients_.push_back(p.gradient);
  }
}

void ParameterPlacement::UseHostValues() {
  host_values_.assign(total_elements_, 0.0f);
  size_t offset = 0;
  for (HostParameter& p : parameters_) {
    p.value = host_values_.data() + offset;
    values_.push_back(p.value);
    gradients_.push_back(nullptr);
    offset += p.elements;
  }
}

Status ParameterPlacement::StartModelSynchronizer() {
  const GradientCompression format = settings_.wire.format;
  if (format != GradientCompression::kNone && !settings_.wire.from_precision) {
    return Status::InvalidArgument(
        std::string("--grad-compression ") + NameOf(CompressionNames(), format) +
        " converts gradients in host memory, but with --device " +
        NameOf(DeviceNames(), settings_.device) + " and the '" + backend_->name() +
        "' backend they are summed on the device; use --grad-compression none");
  }
  if (format != GradientCompression::kNone && settings_.rank == 0) {
    log::Info(std::string("the gradients are summed on the device in float32: ") +
              NameOf(CompressionNames(), format) +
              " buckets (--grad-compression auto) are made in host memory only");
  }
  settings_.wire.format = GradientCompression::kNone;
  std::vector<DLTensor> tensors;
  for (const HostParameter& p : parameters_) tensors.push_back(p.model_gradient);
  return StartSynchronizer(std::move(tensors), GradientScaling::kByCaller, /*callbacks=*/true);
}

void ParameterPlacement::UseHostCopy() {
  UseHostValues();
  host_gradients_.assign(total_elements_, 0.0f);
  size_t offset = 0;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    parameters_[i].gradient = host_gradients_.data() + offset;
    gradients_[i] = parameters_[i].gradient;
    offset += parameters_[i].elements;
  }
  if (settings_.rank == 0) {
    log::Info("the optimizer updates a host copy of the " + std::to_string(total_elements_) +
              " parameters and writes it to the model every step");
  }
}

Status ParameterPlacement::StartSynchronizer(std::vector<DLTensor> tensors, GradientScaling scaling,
                                             bool callbacks) {
  if (backend_ == nullptr) return Status::Ok();
  comm_ = std::make_unique<CommunicationThread>();
  std::vector<size_t> sizes;
  for (const HostParameter& p : parameters_) sizes.push_back(p.elements);
  std::vector<Bucket> buckets = AssignBuckets(sizes, settings_.bucket_cap_bytes);
  const GradientCompression format = settings_.wire.format;
  if (settings_.rank == 0) {
    log::Info("gradients of " + std::to_string(parameters_.size()) + " parameters in " +
              std::to_string(buckets.size()) + " bucket(s) of at most " +
              log::Bytes(uint64_t(settings_.bucket_cap_bytes)) + ", summed " +
              (callbacks ? "in the model's memory" : "in the host copy") + WireText());
  }
  sync_ = std::make_unique<GradientSynchronizer>(backend_, comm_.get(), settings_.world_size,
                                                 std::move(tensors), std::move(buckets), format,
                                                 scaling, model_.info().stream);
  if (!callbacks) return Status::Ok();
  return model_.SetGradientReadyCallback(GradientSynchronizer::GradientReadyTrampoline,
                                         sync_.get());
}

std::string ParameterPlacement::WireText() const {
  const GradientCompression format = settings_.wire.format;
  if (format == GradientCompression::kNone) return "";
  return std::string(", sent as ") + NameOf(CompressionNames(), format) +
         (settings_.wire.from_precision ? " (the precision's, --grad-compression auto)" : "");
}

void ParameterPlacement::BeginStep(float scale) {
  if (sync_) sync_->BeginStep(scale);
}

Status ParameterPlacement::FinishSynchronizer(const Status& step) {
  if (!sync_) return step;
  Status reduced = sync_->FinishStep();  // always drain the communication thread
  DPL_RETURN_IF_ERROR(step);
  return reduced.WithContext("averaging gradients");
}

// Rank 0's parameters go to every rank on the model's own tensors.
Status ParameterPlacement::BroadcastOnModel() {
  if (!comm_) return Status::Ok();
  return comm_
      ->Submit(
          [this] {
            for (HostParameter& p : parameters_) {
              DPL_RETURN_IF_ERROR(backend_->Broadcast(&p.model_value, 0, model_.info().stream));
            }
            return backend_->Synchronize(model_.info().stream);
          },
          {"broadcast", -1, 0, total_elements_ * sizeof(float)})
      .get();
}

Status ParameterPlacement::ReadFromModel(dpl_model_tensors which) {
  std::vector<float>& host = which == DPL_MODEL_TENSORS_VALUES ? host_values_ : host_gradients_;
  return model_.ReadTensors(which, host.data(), uint64_t(host.size()));
}

Status ParameterPlacement::WriteValuesToModel() {
  return model_.WriteTensors(DPL_MODEL_TENSORS_VALUES, host_values_.data(),
                             uint64_t(host_values_.size()));
}

Status ParameterPlacement::PublishHostCopy(StepProfile* profile) {
  DPL_RETURN_IF_ERROR(WriteValuesToModel());
  profile->Lap(StepPhase::kCopies);
  DPL_RETURN_IF_ERROR(model_.ZeroGradients());
  profile->Lap(StepPhase::kOptimizer);
  return Status::Ok();
}

void ParameterPlacement::ScaleGradients(float scale) {
  if (scale == 1.0f) return;
  for (HostParameter& p : parameters_) {
    for (size_t i = 0; i < p.elements; ++i) p.gradient[i] *= scale;
  }
}

Status ParameterPlacement::Detach() {
  if (!sync_) return Status::Ok();
  return model_.SetGradientReadyCallback(nullptr, nullptr);
}

}  // namespace dpl::training
