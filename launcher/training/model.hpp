// One instance of the model plugin, and its calls as Status values that name the plugin.
//
// Plugins of every supported model ABI are driven through this one class. The plugin host hands
// a v1 plugin's table over in the v2 layout (Note [Adapting model ABI v1]); a v2 plugin is called
// with the prefix of the v3 config and info it knows; what an older ABI lacks is answered here
// (no buffers, no random state to save) or refused by the caller through the Has* questions,
// which look at the ABI version, never at a NULL entry.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/plugin_status.hpp"
#include "common/status.hpp"
#include "dpl/model.h"

namespace dpl::training {

// A loaded model plugin: exactly one of the tables is set, by ABI version.
struct ModelPlugin {
  const dpl_model_plugin_v2* v2 = nullptr;  // ABI v1 (adapted) and v2
  const dpl_model_plugin_v3* v3 = nullptr;  // ABI v3
  uint32_t abi_version = 0;
  PluginLabel label;
};

class Model {
 public:
  // Creates the instance with `config` (a v3 config; an older plugin reads its v1 prefix) and
  // describes it.
  static Result<std::unique_ptr<Model>> Create(const ModelPlugin& plugin,
                                               const dpl_model_config_v3& config);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::string& name() const { return plugin_.label.name; }
  uint32_t abi_version() const { return plugin_.abi_version; }
  // ABI v2: host batches, read/write of all values or gradients, so a host copy can be kept.
  bool HasHostCopy() const { return plugin_.abi_version >= 2; }
  // ABI v3: buffers, random state, two host batch slots, the compute stream.
  bool HasV3() const { return plugin_.abi_version >= 3; }
  const dpl_model_info_v3& info() const { return info_; }

  Status Parameter(uint32_t index, dpl_parameter_v2* parameter) const;
  Status Buffer(uint32_t index, dpl_buffer_v3* buffer) const;
  Status SetGradientReadyCallback(dpl_gradient_ready_fn callback, void* context);
  Status SetMode(dpl_model_mode mode);
  Status ZeroGradients();
  Status TrainStep(const DLTensor& input, const DLTensor& labels, float* loss);
  Status EvalStep(const DLTensor& input, const DLTensor& labels, double* loss_sum,
                  int64_t* correct);
  // Host batch memory of `slot` (v2: slot 0 only).
  Status HostBatch(uint32_t slot, int64_t capacity, DLTensor* input, DLTensor* labels);
  Status ReadTensors(dpl_model_tensors which, float* host, uint64_t count);
  Status WriteTensors(dpl_model_tensors which, const float* host, uint64_t count);
  Status ReadBuffers(void* host, uint64_t bytes);
  Status WriteBuffers(const void* host, uint64_t bytes);
  Status RngState(std::vector<uint8_t>* state);
  Status SetRngState(const std::vector<uint8_t>& state);
  // The factor backward multiplies the loss by (fp16 loss scaling; model ABI v3).
  Status SetLossScale(float scale);
  Status SaveState(const std::string& path);
  Status LoadState(const std::string& path);

 private:
  // The entries whose types every supported version shares, copied once from the plugin's table.
  struct Functions {
    void (*destroy)(dpl_model*);
    dpl_status (*parameter)(dpl_model*, uint32_t, dpl_parameter_v2*);
    dpl_status (*set_gradient_ready_callback)(dpl_model*, dpl_gradient_ready_fn, void*);
    dpl_status (*set_mode)(dpl_model*, dpl_model_mode);
    dpl_status (*zero_gradients)(dpl_model*);
    dpl_status (*train_step)(dpl_model*, const DLTensor*, const DLTensor*, float*);
    dpl_status (*eval_step)(dpl_model*, const DLTensor*, const DLTensor*, double*, int64_t*);
    dpl_status (*save_state)(dpl_model*, const char*);
    dpl_status (*load_state)(dpl_model*, const char*);
    const char* (*last_error)(void);
    dpl_status (*host_batch)(dpl_model*, int64_t, DLTensor*, DLTensor*);
    dpl_status (*read_tensors)(dpl_model*, dpl_model_tensors, float*, uint64_t);
    dpl_status (*write_tensors)(dpl_model*, dpl_model_tensors, const float*, uint64_t);
  };

  explicit Model(const ModelPlugin& plugin);
  Status Call(const char* function, dpl_status status) const;
  Status RequireV3(const char* function) const;
  Status Describe();

  ModelPlugin plugin_;
  Functions functions_{};
  dpl_model* instance_ = nullptr;
  dpl_model_info_v3 info_{};
};

}  // namespace dpl::training
