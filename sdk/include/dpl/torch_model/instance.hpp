// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): one model instance, the
// object behind a dpl_model handle. It implements what every entry of the model ABI does, for
// any Network (dpl/torch_model/network.hpp); dpl/torch_model/plugin.hpp turns these methods into
// the C tables of model ABI v1 to v4.
#ifndef DPL_TORCH_MODEL_INSTANCE_HPP
#define DPL_TORCH_MODEL_INSTANCE_HPP

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpl/model.h"
#include "dpl/torch_model/device_optimizer.hpp"
#include "dpl/torch_model/errors.hpp"
#include "dpl/torch_model/gradients.hpp"
#include "dpl/torch_model/host_batches.hpp"
#include "dpl/torch_model/loss.hpp"
#include "dpl/torch_model/network.hpp"
#include "dpl/torch_model/precision.hpp"
#include "dpl/torch_model/rng_state.hpp"
#include "dpl/torch_model/state_file.hpp"
#include "dpl/torch_model/tensor_view.hpp"
#include "dpl/torch_model/warnings.hpp"

namespace dpl {
namespace torch_model {
namespace {

// What create decided besides the network itself.
struct InstanceSettings {
  std::string model_name;
  std::string model_version;
  c10::Device device{c10::kCPU};
  dpl_precision precision = DPL_PRECISION_FP32;
  bool broadcast_buffers = true;   // model option broadcast_buffers (model ABI v3)
  bool replace_gradients = false;  // DPL_MODEL_REPLACED_GRADIENTS (model ABI v4)
  dpl_log_fn log = nullptr;
  void* log_context = nullptr;
};

class Instance;

// Calls the host's gradient-ready callback once autograd has accumulated one parameter's grad.
class GradientReadyHook : public torch::autograd::FunctionPostHook {
 public:
  GradientReadyHook(Instance* instance, uint32_t index) : instance_(instance), index_(index) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override;

 private:
  Instance* instance_;
  uint32_t index_;
};

class Instance {
 public:
  // `data`: the typed samples the network was built for (its input shape and classes as `spec`
  // says them).
  Instance(InstanceSettings settings, NetworkSpec spec, DataShape data,
           std::unique_ptr<WarningLog> warnings)
      : settings_(std::move(settings)),
        warnings_(std::move(warnings)),
        network_(std::move(spec.network)),
        data_(std::move(data)),
        loss_(spec.loss),
        batches_(settings_.device, data_) {
    network_->SetTraining(true);
    CollectParameters();
    CollectBuffers();
  }

  const InstanceSettings& settings() const { return settings_; }
  c10::Device device() const { return settings_.device; }
  Network& network() { return *network_; }
  // Where libtorch's warnings go during this instance's calls (Note [libtorch warnings]).
  WarningLog* warnings() const { return warnings_.get(); }

  void Log(dpl_log_level level, const std::string& message) const {
    if (settings_.log != nullptr) settings_.log(settings_.log_context, level, message.c_str());
  }

  void NotifyGradientReady(uint32_t index) {
    gradients_.Arrived(index);
    if (gradient_ready_ != nullptr) gradient_ready_(gradient_ready_context_, index);
  }

  std::string Summary() const {
    int64_t elements = 0;
    for (const auto& parameter : parameters_) elements += parameter.numel();
    std::string text = "model " + settings_.model_name + " " + settings_.model_version + ": " +
                       std::to_string(parameters_.size()) + " parameter tensors, " +
                       std::to_string(elements) + " elements, on " + settings_.device.str();
    if (!buffers_.empty()) text += ", " + std::to_string(buffers_.size()) + " buffers";
    if (settings_.precision != DPL_PRECISION_FP32) {
      text += ", forward in " + std::string(PrecisionName(settings_.precision));
    }
    return text;
  }

  // --- describe, parameter, buffer ---

  void FillInfo(dpl_model_info_v1* info) const {
    const std::vector<int64_t>& input_shape = data_.input_shape;
    if (input_shape.size() > DPL_MODEL_MAX_INPUT_DIMS) {
      throw PluginError(DPL_ERR_INTERNAL, std::string("input has more than ") +
                                              std::to_string(DPL_MODEL_MAX_INPUT_DIMS) + " dims");
    }
    info->input_ndim = static_cast<uint32_t>(input_shape.size());
    for (uint32_t i = 0; i < DPL_MODEL_MAX_INPUT_DIMS; ++i) {
      info->input_shape[i] = i < info->input_ndim ? input_shape[i] : 0;
    }
    info->num_classes = data_.num_classes;
    info->parameter_count = static_cast<uint32_t>(parameters_.size());
    info->reserved = 0;
  }

  // Note [The compute stream]: the helper issues all device work on the device's default stream
  // and changes no stream, so info.stream is NULL on CUDA too (the legacy default stream, which
  // model ABI v3 spells NULL). Naming a non-default stream would need the CUDA headers, which a
  // plugin built against a CPU-only libtorch does not have.
  void FillInfoV3(dpl_model_info_v3* info) const {
    info->buffer_count = static_cast<uint32_t>(buffers_.size());
    info->flags = settings_.broadcast_buffers ? DPL_MODEL_BROADCAST_BUFFERS : 0u;
    info->stream = nullptr;
  }

  // The typed samples and the optimizer on the model's device (model ABI v4; the host decides
  // whether it runs the optimizer here or in its own memory).
  void FillInfoV4(dpl_model_info_v4* info) const {
    info->flags |= DPL_MODEL_DEVICE_OPTIMIZER;
    if (settings_.replace_gradients) info->flags |= DPL_MODEL_REPLACED_GRADIENTS;
    info->input = SampleTensor(data_.input_dtype, data_.input_shape);
    info->target = SampleTensor(data_.target_dtype, data_.target_shape);
  }

  static dpl_sample_tensor_v2 SampleTensor(const DLDataType& dtype,
                                           const std::vector<int64_t>& shape) {
    if (shape.size() > DPL_DATASET_MAX_SAMPLE_DIMS) {
      throw PluginError(
          DPL_ERR_INTERNAL,
          "a sample has more than " + std::to_string(DPL_DATASET_MAX_SAMPLE_DIMS) + " dims");
    }
    dpl_sample_tensor_v2 tensor{};
    tensor.dtype = dtype;
    tensor.ndim = static_cast<uint32_t>(shape.size());
    std::copy(shape.begin(), shape.end(), tensor.shape);
    return tensor;
  }

  void FillParameter(uint32_t index, dpl_parameter_v1* parameter) const {
    if (index >= parameters_.size()) {
      throw InvalidArgument("parameter index " + std::to_string(index) +
                            " is out of range; the model has " +
                            std::to_string(parameters_.size()) + " parameters");
    }
    parameter->reserved = 0;
    parameter->name = parameter_names_[index].c_str();
    parameter->value = value_views_[index].tensor;
    parameter->gradient = gradient_views_[index].tensor;
  }

  void FillBuffer(uint32_t index, dpl_buffer_v3* buffer) const {
    if (index >= buffers_.size()) {
      throw InvalidArgument("buffer index " + std::to_string(index) +
                            " is out of range; the model has " + std::to_string(buffers_.size()) +
                            " buffers");
    }
    buffer->reserved = 0;
    buffer->name = buffer_names_[index].c_str();
    buffer->value = buffer_views_[index].tensor;
  }

  // --- mode, callbacks, gradients ---

  void SetGradientReadyCallback(dpl_gradient_ready_fn callback, void* user_context) {
    gradient_ready_ = callback;
    gradient_ready_context_ = callback ? user_context : nullptr;
  }

  void SetMode(dpl_model_mode mode) {
    if (mode != DPL_MODEL_MODE_TRAIN && mode != DPL_MODEL_MODE_EVAL) {
      throw InvalidArgument("unknown mode " + std::to_string(static_cast<int>(mode)));
    }
    network_->SetTraining(mode == DPL_MODEL_MODE_TRAIN);
  }

  void ZeroGradients() {  // Note [Replaced gradients]
    gradients_.Zero();
    if (!settings_.replace_gradients) gradients_.Settle();
  }

  // set_loss_scale: backward runs on loss * scale (Note [Mixed precision]).
  void SetLossScale(float scale) {
    if (!(scale > 0.0f) || !std::isfinite(scale)) {
      char text[32];
      std::snprintf(text, sizeof text, "%g", double(scale));
      throw InvalidArgument(std::string("loss scale ") + text + " is not a positive finite number");
    }
    loss_scale_ = scale;
  }

  // --- steps ---

  float TrainStep(const DLTensor* input, const DLTensor* labels) {
    const std::pair<torch::Tensor, torch::Tensor> batch = batches_.Wrap(input, labels);
    if (network_->HasOwnTrainStep()) return OwnTrainStep(batch.first, batch.second);
    torch::Tensor output;
    {
      AutocastScope autocast(settings_.precision, settings_.device);
      output = network_->Forward(batch.first);
    }
    CheckBuffersKept();
    torch::Tensor mean_loss =
        ElementLoss(loss_, output, batch.second, data_.num_classes, at::Reduction::Mean);
    FlatGradients::Backward backward(gradients_);
    if (loss_scale_ == 1.0f) {
      mean_loss.backward();
    } else {
      (mean_loss * loss_scale_).backward();
    }
    return mean_loss.item<float>();
  }

  // Note [A network's own training step] (network.hpp): the gradients are ready together, when
  // the step returns; the host hears of them last to first, as backward would give them.
  float OwnTrainStep(const torch::Tensor& input, const torch::Tensor& target) {
    const float loss = network_->TrainStep(input, target, gradients_.StepTargets());
    gradients_.Collect(loss_scale_);
    for (size_t i = parameters_.size(); i-- > 0;) NotifyGradientReady(static_cast<uint32_t>(i));
    return loss;
  }

  Evaluation EvalStep(const DLTensor* input, const DLTensor* labels) {
    const std::pair<torch::Tensor, torch::Tensor> batch = batches_.Wrap(input, labels);
    torch::NoGradGuard no_grad;
    const bool was_training = network_->IsTraining();
    network_->SetTraining(false);
    struct RestoreMode {
      Network& network;
      bool training;
      ~RestoreMode() { network.SetTraining(training); }
    } restore{*network_, was_training};
    torch::Tensor output;
    {
      AutocastScope autocast(settings_.precision, settings_.device);
      output = network_->Forward(batch.first);
    }
    CheckBuffersKept();
    return Evaluate(loss_, output, batch.second, data_.num_classes);
  }

  void HostBatch(uint32_t slot, int64_t capacity, DLTensor* input, DLTensor* labels) {
    batches_.Slot(slot, capacity, input, labels);
  }

  // --- parameters and buffers to and from the host ---

  static void RequireKnownTensors(dpl_model_tensors which);

  // Blocking copies (non_blocking = false): from a device they wait for all work issued before
  // on the default stream, collectives included.
  void ReadTensors(dpl_model_tensors which, float* host, uint64_t count);

  void WriteTensors(dpl_model_tensors which, const float* host, uint64_t count);

  // share_parameters and share_gradients take host memory, before any set_optimizer (whose
  // state views the tensors as they are), `count` floats for every parameter.
  void RequireSharable(const char* entry, const float* memory, uint64_t count) const;

  // share_parameters: the parameters compute with the host's memory from now on (one copy for a
  // machine's workers). set_data keeps each parameter's identity (autograd's accumulator and
  // hook, a scripted module's attribute) and swaps its storage.
  void ShareParameters(float* values, uint64_t count);

  // share_gradients: the flat gradient buffer moves into the host's memory (Note [Flat
  // gradients]); the host keeps the shapes it was given, so only the addresses change.
  void ShareGradients(float* gradients, uint64_t count);

  // --- the optimizer on the model's device (Note [Device optimizer]) ---

  void SetOptimizer(const dpl_optimizer_config_v4& config) {
    optimizer_.reset();  // the old state goes before the new is allocated
    optimizer_ = std::make_unique<DeviceOptimizer>(config, parameters_, gradients_.flat());
  }

  void GradientStatistics(dpl_gradient_statistics_v4* statistics) {
    DeviceOptimizer::Statistics(gradients_.flat(), statistics);
  }

  void ApplyUpdate(const dpl_update_v4& update) {
    gradients_.Settle();
    RequireOptimizer().Apply(update);
  }

  // --- buffers ---

  void ReadBuffers(void* host, uint64_t bytes);

  void WriteBuffers(const void* host, uint64_t bytes);

  // --- random state ---

  void RngState(void* state, uint64_t capacity, uint64_t* size) const;

  void SetRngState(const void* state, uint64_t size) const;

  // --- state files ---

  void SaveState(const std::string& path, uint32_t abi_version);

  // Copies every saved tensor INTO the existing one, so parameter and buffer views stay valid
  // (the network's Load; Network::Load checks everything before it copies anything).
  void LoadState(const std::string& path);

 private:
  // Trainable parameters get the ABI's parameter list; frozen ones (requires_grad false) are
  // model state the optimizer must not touch, so they are listed with the buffers.
  void CollectParameters() {
    torch::NoGradGuard no_grad;
    for (auto& [name, parameter] : network_->NamedParameters()) {
      if (!parameter.requires_grad()) {
        frozen_.emplace_back(name, parameter);
        continue;
      }
      if (parameter.scalar_type() != torch::kFloat32 || !parameter.is_contiguous()) {
        throw PluginError(DPL_ERR_UNSUPPORTED,
                          "parameter " + name + " is not a contiguous float32 tensor");
      }
      parameter_names_.push_back(name);
      parameters_.push_back(parameter);
    }
    gradients_.Bind(parameters_, settings_.device);  // Note [Flat gradients]
    const size_t count = parameters_.size();
    value_views_.resize(count);
    gradient_views_.resize(count);
    for (size_t i = 0; i < count; ++i) {
      value_views_[i].Bind(parameters_[i]);
      gradient_views_[i].Bind(gradients_.view(i));
      auto accumulator = torch::autograd::impl::grad_accumulator(parameters_[i]);
      accumulator->add_post_hook(
          std::make_unique<GradientReadyHook>(this, static_cast<uint32_t>(i)));
      accumulators_.push_back(std::move(accumulator));
    }
  }

  void CollectBuffers() {
    NamedTensors listed = frozen_;
    for (auto& buffer : network_->NamedBuffers()) listed.push_back(std::move(buffer));
    for (auto& [name, buffer] : listed) {
      if (!buffer.is_contiguous()) {
        throw PluginError(DPL_ERR_UNSUPPORTED, "buffer " + name + " is not contiguous");
      }
      buffer_names_.push_back(name);
      buffers_.push_back(buffer);
      buffer_views_.emplace_back();
      buffer_views_.back().Bind(buffer);
    }
  }

  // The ABI promises fixed buffer addresses; a forward that assigns a new tensor to a buffer
  // instead of updating it in place would silently detach the host's view.
  void CheckBuffersKept() const {
    if (buffers_.size() == frozen_.size()) return;
    size_t index = frozen_.size();
    for (const auto& [name, buffer] : network_->NamedBuffers()) {
      if (index >= buffers_.size() || !buffer.is_same(buffers_[index])) {
        throw PluginError(DPL_ERR_UNSUPPORTED,
                          "forward replaced buffer " + name +
                              " with a new tensor; update buffers in place (e.g. "
                              "buffer.copy_(value) or buffer.add_(1)), as BatchNorm does");
      }
      ++index;
    }
  }

  // The host-memory side of read_tensors / write_tensors: one float32 tensor per parameter over
  // `host`, after checking that `count` is exactly what the model holds.
  std::vector<torch::Tensor> HostSlices(const float* host, uint64_t count) const;

  void RequireHostCount(const float* host, uint64_t count) const;

  // (host slice, buffer) pairs over `host`, after checking `bytes` is exactly the buffers' size.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> BufferSlices(void* host,
                                                                    uint64_t bytes) const;

  DeviceOptimizer& RequireOptimizer() const;

  torch::Tensor& OptimizerState(dpl_model_tensors which) const;

  // `count` floats at `host` as a tensor, after checking they are exactly optimizer state
  // `which`'s elements.
  torch::Tensor HostState(dpl_model_tensors which, float* host, uint64_t count) const;

  torch::Tensor Selected(dpl_model_tensors which, size_t index);

  InstanceSettings settings_;
  std::unique_ptr<WarningLog> warnings_;  // outlives the network, which may warn when freed
  std::unique_ptr<Network> network_;
  DataShape data_;  // the typed samples the network takes
  Loss loss_;

  std::vector<std::string> parameter_names_;
  std::vector<torch::Tensor> parameters_;
  std::vector<TensorView> value_views_;
  std::vector<TensorView> gradient_views_;
  FlatGradients gradients_;  // Note [Flat gradients]
  // Owning references: autograd keeps only a weak one, and a new accumulator would lose our hook.
  std::vector<NodeHandle> accumulators_;

  NamedTensors frozen_;  // parameters with requires_grad false, listed first among the buffers
  std::vector<std::string> buffer_names_;
  std::vector<torch::Tensor> buffers_;
  std::vector<TensorView> buffer_views_;

  HostBatches batches_;
  float loss_scale_ = 1.0f;                     // set_loss_scale
  std::unique_ptr<DeviceOptimizer> optimizer_;  // set_optimizer's

  // Set by the host thread between steps, read by autograd threads during train_step.
  dpl_gradient_ready_fn gradient_ready_ = nullptr;
  void* gradient_ready_context_ = nullptr;
};

inline torch::autograd::variable_list GradientReadyHook::operator()(
    const torch::autograd::variable_list& outputs,
    const torch::autograd::variable_list& /*inputs*/) {
  instance_->NotifyGradientReady(index_);
  return outputs;
}

}  // namespace
}  // namespace torch_model
}  // namespace dpl

// The definitions of what the instance moves to and from the host's memory.
#include "dpl/torch_model/instance_host_memory.hpp"

#endif  // DPL_TORCH_MODEL_INSTANCE_HPP
