// One instance of the model plugin, and its calls as Status values that name the plugin.
//
// Plugins of every supported model ABI are driven through this one class: the plugin host's
// adapter turned the plugin's table into one interface (plugin_host/model_interface.hpp), in the
// layout of dpl/model.h. What the plugin cannot do is a capability it lacks (Has: this instance's,
// Note [Capabilities of an instance]); asking a call of a missing capability is an error that
// names the ABI to rebuild the plugin against.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/plugin_status.hpp"
#include "common/status.hpp"
#include "plugin_host/model_interface.hpp"

namespace dpl::training {

using plugin_host::ModelCapability;

// A loaded model plugin.
struct ModelPlugin {
  std::shared_ptr<const plugin_host::ModelInterface> table;
  PluginLabel label;
};

// "model 'NAME' is a model ABI vN plugin, which " + `what`: how messages about a missing
// capability begin.
std::string ModelAbiText(const ModelPlugin& plugin, const std::string& what);

class Model {
 public:
  // Creates the instance with `config` (the plugin's adapter sets its struct_size and version)
  // and describes it.
  static Result<std::unique_ptr<Model>> Create(const ModelPlugin& plugin,
                                               const dpl_model_config& config);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::string& name() const { return plugin_.label.name; }
  const ModelPlugin& plugin() const { return plugin_; }
  // Whether this instance can: its table's capabilities and what its info said.
  bool Has(ModelCapability capability) const { return capabilities_.Has(capability); }
  // How many host batch buffers the model hands out (HostBatch's slots).
  uint32_t host_batch_slots() const;
  const dpl_model_info& info() const { return info_; }

  Status Parameter(uint32_t index, dpl_parameter* parameter) const;
  Status Buffer(uint32_t index, dpl_buffer* buffer) const;
  Status SetGradientReadyCallback(dpl_gradient_ready_fn callback, void* context);
  Status SetMode(dpl_model_mode mode);
  Status ZeroGradients();
  // A batch of info().input and info().target; *loss the mean over every target element.
  Status TrainStep(const DLTensor& input, const DLTensor& target, float* loss);
  // The loss sum, target elements and elements predicted right of a batch.
  Status EvalStep(const DLTensor& input, const DLTensor& target, dpl_eval_result* result);
  // Host batch memory of `slot` < host_batch_slots().
  Status HostBatch(uint32_t slot, int64_t capacity, DLTensor* input, DLTensor* target);
  // The optimizer on the model's device (kDeviceOptimizer; Note [Device optimizer] in the SDK).
  Status SetOptimizer(const dpl_optimizer_config& config);
  Status GradientStatistics(dpl_gradient_statistics* statistics);
  Status ApplyUpdate(const dpl_update& update);
  // The model computes with parameter values in the host's memory from now on (kShareParameters):
  // `count` floats in read_tensors' layout.
  Status ShareParameters(float* values, uint64_t count);
  // Likewise for its gradients (kShareGradients).
  Status ShareGradients(float* gradients, uint64_t count);
  Status ReadTensors(dpl_model_tensors which, float* host, uint64_t count);
  Status WriteTensors(dpl_model_tensors which, const float* host, uint64_t count);
  Status ReadBuffers(void* host, uint64_t bytes);
  Status WriteBuffers(const void* host, uint64_t bytes);
  Status RngState(std::vector<uint8_t>* state);
  Status SetRngState(const std::vector<uint8_t>& state);
  // The factor backward multiplies the loss by (fp16 loss scaling).
  Status SetLossScale(float scale);
  Status SaveState(const std::string& path);
  Status LoadState(const std::string& path);

 private:
  explicit Model(const ModelPlugin& plugin) : plugin_(plugin), table_(*plugin.table) {}
  Status Call(const char* function, dpl_status status) const;
  // Ok when the plugin has `capability`, else the error for calling `function` without it.
  Status Require(ModelCapability capability, const char* function) const;
  Status RequireDeviceOptimizer(const char* function) const;
  Status Describe();

  ModelPlugin plugin_;
  const plugin_host::ModelInterface& table_;  // *plugin_.table
  dpl_model* instance_ = nullptr;
  dpl_model_info info_{};
  plugin_host::CapabilitySet<ModelCapability> capabilities_;  // this instance's (Describe)
};

}  // namespace dpl::training
