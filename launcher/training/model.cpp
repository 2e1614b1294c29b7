#include "training/model.hpp"

#include <algorithm>

namespace dpl::training {
namespace {

template <typename Table, typename Functions>
void CopyShared(const Table& table, Functions* functions) {
  functions->destroy = table.destroy;
  functions->parameter = table.parameter;
  functions->set_gradient_ready_callback = table.set_gradient_ready_callback;
  functions->set_mode = table.set_mode;
  functions->zero_gradients = table.zero_gradients;
  functions->train_step = table.train_step;
  functions->eval_step = table.eval_step;
  functions->save_state = table.save_state;
  functions->load_state = table.load_state;
  functions->last_error = table.last_error;
  functions->host_batch = table.host_batch;
  functions->read_tensors = table.read_tensors;
  functions->write_tensors = table.write_tensors;
}

// The v1 prefix of a v3 config, for a plugin of ABI v1 or v2.
dpl_model_config_v1 PrefixOf(const dpl_model_config_v3& config, uint32_t abi_version) {
  dpl_model_config_v1 older{};
  older.struct_size = sizeof older;
  older.version = abi_version;
  older.options = config.options;
  older.device_type = config.device_type;
  older.device_id = config.device_id;
  older.seed = config.seed;
  older.num_threads = config.num_threads;
  older.reserved = 0;
  older.log = config.log;
  older.log_context = config.log_context;
  return older;
}

}  // namespace

Model::Model(const ModelPlugin& plugin) : plugin_(plugin) {
  if (plugin.v3 != nullptr) {
    CopyShared(*plugin.v3, &functions_);
  } else {
    CopyShared(*plugin.v2, &functions_);
  }
}

Model::~Model() {
  if (instance_ != nullptr) functions_.destroy(instance_);
}

Result<std::unique_ptr<Model>> Model::Create(const ModelPlugin& plugin,
                                             const dpl_model_config_v3& config) {
  std::unique_ptr<Model> model(new Model(plugin));
  dpl_status created = DPL_OK;
  if (plugin.v3 != nullptr) {
    created = plugin.v3->create(&config, &model->instance_);
  } else {
    const dpl_model_config_v1 older = PrefixOf(config, plugin.abi_version);
    created = plugin.v2->create(&older, &model->instance_);
  }
  DPL_RETURN_IF_ERROR(model->Call("create", created));
  DPL_RETURN_IF_ERROR(model->Describe());
  return model;
}

Status Model::Describe() {
  info_ = dpl_model_info_v3{};
  info_.struct_size = sizeof info_;
  if (plugin_.v3 != nullptr) return Call("describe", plugin_.v3->describe(instance_, &info_));
  dpl_model_info_v1 older{};
  older.struct_size = sizeof older;
  DPL_RETURN_IF_ERROR(Call("describe", plugin_.v2->describe(instance_, &older)));
  info_.input_ndim = older.input_ndim;
  std::copy(older.input_shape, older.input_shape + DPL_MODEL_MAX_INPUT_DIMS, info_.input_shape);
  info_.num_classes = older.num_classes;
  info_.parameter_count = older.parameter_count;
  return Status::Ok();  // no buffers, no flags, the legacy default stream
}

Status Model::Call(const char* function, dpl_status status) const {
  if (status == DPL_OK) return Status::Ok();
  return PluginCallFailure(plugin_.label, function, status, functions_.last_error());
}

Status Model::RequireV3(const char* function) const {
  if (HasV3()) return Status::Ok();
  return Status::Error(DPL_ERR_UNSUPPORTED, "model '" + name() + "' is a model ABI v" +
                                                std::to_string(abi_version()) +
                                                " plugin, which has no " + function +
                                                "; rebuild it against the dpl SDK (model ABI v3)");
}

Status Model::Parameter(uint32_t index, dpl_parameter_v2* parameter) const {
  parameter->struct_size = sizeof *parameter;
  return Call("parameter", functions_.parameter(instance_, index, parameter));
}

Status Model::Buffer(uint32_t index, dpl_buffer_v3* buffer) const {
  DPL_RETURN_IF_ERROR(RequireV3("buffer"));
  buffer->struct_size = sizeof *buffer;
  return Call("buffer", plugin_.v3->buffer(instance_, index, buffer));
}

Status Model::SetGradientReadyCallback(dpl_gradient_ready_fn callback, void* context) {
  return Call("set_gradient_ready_callback",
              functions_.set_gradient_ready_callback(instance_, callback, context));
}

Status Model::SetMode(dpl_model_mode mode) {
  return Call("set_mode", functions_.set_mode(instance_, mode));
}

Status Model::ZeroGradients() {
  return Call("zero_gradients", functions_.zero_gradients(instance_));
}

Status Model::TrainStep(const DLTensor& input, const DLTensor& labels, float* loss) {
  return Call("train_step", functions_.train_step(instance_, &input, &labels, loss));
}

Status Model::EvalStep(const DLTensor& input, const DLTensor& labels, double* loss_sum,
                       int64_t* correct) {
  return Call("eval_step", functions_.eval_step(instance_, &input, &labels, loss_sum, correct));
}

Status Model::HostBatch(uint32_t slot, int64_t capacity, DLTensor* input, DLTensor* labels) {
  if (HasV3() && slot != 0) {  // slot 0 is host_batch's buffer (dpl/model_v3.h)
    return Call("host_batch_slot",
                plugin_.v3->host_batch_slot(instance_, slot, capacity, input, labels));
  }
  if (!HasHostCopy() || slot != 0) {  // ABI v1: none; ABI v2: one
    return Status::Error(DPL_ERR_UNSUPPORTED,
                         "model '" + name() + "' has no host batch slot " + std::to_string(slot));
  }
  return Call("host_batch", functions_.host_batch(instance_, capacity, input, labels));
}

Status Model::ReadTensors(dpl_model_tensors which, float* host, uint64_t count) {
  return Call("read_tensors", functions_.read_tensors(instance_, which, host, count));
}

Status Model::WriteTensors(dpl_model_tensors which, const float* host, uint64_t count) {
  return Call("write_tensors", functions_.write_tensors(instance_, which, host, count));
}

Status Model::ReadBuffers(void* host, uint64_t bytes) {
  DPL_RETURN_IF_ERROR(RequireV3("read_buffers"));
  return Call("read_buffers", plugin_.v3->read_buffers(instance_, host, bytes));
}

Status Model::WriteBuffers(const void* host, uint64_t bytes) {
  DPL_RETURN_IF_ERROR(RequireV3("write_buffers"));
  return Call("write_buffers", plugin_.v3->write_buffers(instance_, host, bytes));
}

Status Model::RngState(std::vector<uint8_t>* state) {
  DPL_RETURN_IF_ERROR(RequireV3("rng_state"));
  uint64_t size = 0;
  state->resize(256);
  dpl_status status = plugin_.v3->rng_state(instance_, state->data(), state->size(), &size);
  if (status == DPL_ERR_BUFFER_TOO_SMALL) {
    state->resize(size);
    status = plugin_.v3->rng_state(instance_, state->data(), state->size(), &size);
  }
  DPL_RETURN_IF_ERROR(Call("rng_state", status));
  state->resize(size);
  return Status::Ok();
}

Status Model::SetRngState(const std::vector<uint8_t>& state) {
  DPL_RETURN_IF_ERROR(RequireV3("set_rng_state"));
  return Call("set_rng_state", plugin_.v3->set_rng_state(instance_, state.data(), state.size()));
}

Status Model::SetLossScale(float scale) {
  DPL_RETURN_IF_ERROR(RequireV3("set_loss_scale"));
  return Call("set_loss_scale", plugin_.v3->set_loss_scale(instance_, scale));
}

Status Model::SaveState(const std::string& path) {
  return Call("save_state", functions_.save_state(instance_, path.c_str()));
}

Status Model::LoadState(const std::string& path) {
  return Call("load_state", functions_.load_state(instance_, path.c_str()));
}

}  // namespace dpl::training
