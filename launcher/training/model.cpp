#include "training/model.hpp"

namespace dpl::training {

std::string ModelAbiText(const ModelPlugin& plugin, const std::string& what) {
  return "model '" + plugin.label.name + "' is a " + plugin.table->abi + " plugin, which " + what;
}

Model::~Model() {
  if (instance_ != nullptr) table_.destroy(instance_);
}

Result<std::unique_ptr<Model>> Model::Create(const ModelPlugin& plugin,
                                             const dpl_model_config& config) {
  std::unique_ptr<Model> model(new Model(plugin));
  DPL_RETURN_IF_ERROR(model->Call("create", model->table_.create(&config, &model->instance_)));
  DPL_RETURN_IF_ERROR(model->Describe());
  return model;
}

Status Model::Describe() {
  info_ = dpl_model_info{};
  info_.struct_size = sizeof info_;
  DPL_RETURN_IF_ERROR(Call("describe", table_.describe(instance_, &info_)));
  const Result<plugin_host::CapabilitySet<ModelCapability>> described =
      table_.described_capabilities(info_);
  if (!described.ok()) {
    return Status::Error(described.status().code(),
                         ModelAbiText(plugin_, described.status().message()));
  }
  capabilities_ = table_.capabilities.Without(table_.per_instance).With(*described);
  return Status::Ok();
}

Status Model::RequireDeviceOptimizer(const char* function) const {
  if (Has(ModelCapability::kDeviceOptimizer)) return Status::Ok();
  return Status::Error(DPL_ERR_UNSUPPORTED,
                       "model '" + name() + "' does not run an optimizer on its device (no " +
                           function + "); train it without a device optimizer");
}

Status Model::SetOptimizer(const dpl_optimizer_config& config) {
  DPL_RETURN_IF_ERROR(RequireDeviceOptimizer("set_optimizer"));
  return Call("set_optimizer", table_.set_optimizer(instance_, &config));
}

Status Model::GradientStatistics(dpl_gradient_statistics* statistics) {
  DPL_RETURN_IF_ERROR(RequireDeviceOptimizer("gradient_statistics"));
  *statistics = dpl_gradient_statistics{};
  statistics->struct_size = sizeof *statistics;
  return Call("gradient_statistics", table_.gradient_statistics(instance_, statistics));
}

Status Model::ApplyUpdate(const dpl_update& update) {
  DPL_RETURN_IF_ERROR(RequireDeviceOptimizer("apply_update"));
  return Call("apply_update", table_.apply_update(instance_, &update));
}

Status Model::Call(const char* function, dpl_status status) const {
  if (status == DPL_OK) return Status::Ok();
  return PluginCallFailure(plugin_.label, function, status, table_.last_error());
}

Status Model::Require(ModelCapability capability, const char* function) const {
  if (Has(capability)) return Status::Ok();
  return Status::Error(DPL_ERR_UNSUPPORTED,
                       ModelAbiText(plugin_, std::string("has no ") + function +
                                                 "; rebuild it against the dpl SDK (" +
                                                 plugin_host::FirstAbiWith(capability) + ")"));
}

uint32_t Model::host_batch_slots() const {
  if (Has(ModelCapability::kHostBatchSlots)) return DPL_MODEL_HOST_BATCH_SLOTS;
  return Has(ModelCapability::kHostCopy) ? 1 : 0;
}

Status Model::Parameter(uint32_t index, dpl_parameter* parameter) const {
  parameter->struct_size = sizeof *parameter;
  return Call("parameter", table_.parameter(instance_, index, parameter));
}

Status Model::Buffer(uint32_t index, dpl_buffer* buffer) const {
  DPL_RETURN_IF_ERROR(Require(ModelCapability::kBuffers, "buffer"));
  buffer->struct_size = sizeof *buffer;
  return Call("buffer", table_.buffer(instance_, index, buffer));
}

Status Model::SetGradientReadyCallback(dpl_gradient_ready_fn callback, void* context) {
  return Call("set_gradient_ready_callback",
              table_.set_gradient_ready_callback(instance_, callback, context));
}

Status Model::SetMode(dpl_model_mode mode) {
  return Call("set_mode", table_.set_mode(instance_, mode));
}

Status Model::ZeroGradients() {
  return Call("zero_gradients", table_.zero_gradients(instance_));
}

Status Model::TrainStep(const DLTensor& input, const DLTensor& target, float* loss) {
  return Call("train_step", table_.train_step(instance_, &input, &target, loss));
}

Status Model::EvalStep(const DLTensor& input, const DLTensor& target, dpl_eval_result* result) {
  *result = dpl_eval_result{};
  result->struct_size = sizeof *result;
  return Call("eval_step", table_.eval_step(instance_, &input, &target, result));
}

Status Model::HostBatch(uint32_t slot, int64_t capacity, DLTensor* input, DLTensor* target) {
  if (slot >= host_batch_slots()) {
    return Status::Error(DPL_ERR_UNSUPPORTED,
                         "model '" + name() + "' has no host batch slot " + std::to_string(slot));
  }
  if (slot != 0) {  // slot 0 is host_batch's buffer (dpl/model.h)
    return Call("host_batch_slot",
                table_.host_batch_slot(instance_, slot, capacity, input, target));
  }
  return Call("host_batch", table_.host_batch(instance_, capacity, input, target));
}

Status Model::ShareParameters(float* values, uint64_t count) {
  DPL_RETURN_IF_ERROR(Require(ModelCapability::kShareParameters, "share_parameters"));
  return Call("share_parameters", table_.share_parameters(instance_, values, count));
}

Status Model::ShareGradients(float* gradients, uint64_t count) {
  DPL_RETURN_IF_ERROR(Require(ModelCapability::kShareGradients, "share_gradients"));
  return Call("share_gradients", table_.share_gradients(instance_, gradients, count));
}

Status Model::ReadTensors(dpl_model_tensors which, float* host, uint64_t count) {
  DPL_RETURN_IF_ERROR(Require(ModelCapability::kHostCopy, "read_tensors"));
  return Call("read_tensors", table_.read_tensors(instance_, which, host, count));
}

Status Model::WriteTensors(dpl_model_tensors which, const float* host, uint64_t count) {
  DPL_RETURN_IF_ERROR(Require(ModelCapability::kHostCopy, "write_tensors"));
  return Call("write_tensors", table_.write_tensors(instance_, which, host, count));
}

Status Model::ReadBuffers(void* host, uint64_t bytes) {
  DPL_RETURN_IF_ERROR(Require(ModelCapability::kBuffers, "read_buffers"));
  return Call("read_buffers", table_.read_buffers(instance_, host, bytes));
}

Status Model::WriteBuffers(const void* host, uint64_t bytes) {
  DPL_RETURN_IF_ERROR(Require(ModelCapability::kBuffers, "write_buffers"));
  return Call("write_buffers", table_.write_buffers(instance_, host, bytes));
}

Status Model::RngState(std::vector<uint8_t>* state) {
  DPL_RETURN_IF_ERROR(Require(ModelCapability::kRngState, "rng_state"));
  uint64_t size = 0;
  state->resize(256);
  dpl_status status = table_.rng_state(instance_, state->data(), state->size(), &size);
  if (status == DPL_ERR_BUFFER_TOO_SMALL) {
    state->resize(size);
    status = table_.rng_state(instance_, state->data(), state->size(), &size);
  }
  DPL_RETURN_IF_ERROR(Call("rng_state", status));
  state->resize(size);
  return Status::Ok();
}

Status Model::SetRngState(const std::vector<uint8_t>& state) {
  DPL_RETURN_IF_ERROR(Require(ModelCapability::kRngState, "set_rng_state"));
  return Call("set_rng_state", table_.set_rng_state(instance_, state.data(), state.size()));
}

Status Model::SetLossScale(float scale) {
  DPL_RETURN_IF_ERROR(Require(ModelCapability::kLossScale, "set_loss_scale"));
  return Call("set_loss_scale", table_.set_loss_scale(instance_, scale));
}

Status Model::SaveState(const std::string& path) {
  return Call("save_state", table_.save_state(instance_, path.c_str()));
}

Status Model::LoadState(const std::string& path) {
  return Call("load_state", table_.load_state(instance_, path.c_str()));
}

}  // namespace dpl::training
