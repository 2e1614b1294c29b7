// A model of this process for unit tests of the step's parts: float32 parameters of the given
// sizes in host memory, a train step whose gradients follow from the batch and the values, and
// as the options say the host copy's entries (kHostCopy) and an optimizer of its own (SGD on its
// values: kDeviceOptimizer). No plugin file, no libtorch.
#pragma once

#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "training/host_tensor.hpp"
#include "training/model.hpp"

namespace dpl::training::fakes {

struct FakeModelOptions {
  std::vector<size_t> sizes = {5, 3, 4};
  bool host_copy = true;
  bool device_optimizer = false;
};

// One instance's memory, as the test sees it through the plugin.
struct FakeModelState {
  std::vector<std::vector<float>> values, gradients;
  std::vector<int64_t> shapes;
  std::vector<std::string> names;
  dpl_gradient_ready_fn ready = nullptr;
  void* ready_context = nullptr;
  int zeroed = 0;     // zero_gradients calls
  int applied = 0;    // apply_update calls
  double factor = 0;  // the last apply_update's gradient factor
};

namespace detail {

inline FakeModelState& StateOf(dpl_model* model) {
  return *reinterpret_cast<FakeModelState*>(model);
}

// The tensors of every parameter, back to back (read_tensors' and write_tensors' layout).
inline std::vector<std::vector<float>>& TensorsOf(FakeModelState& state, dpl_model_tensors which) {
  return which == DPL_MODEL_TENSORS_VALUES ? state.values : state.gradients;
}

// Gradient of element i of parameter p: the batch's sum times (p + 1), plus half the value.
inline dpl_status TrainStep(dpl_model* model, const DLTensor* input, float* loss) {
  FakeModelState& state = StateOf(model);
  float batch = 0.0f;
  for (size_t i = 0; i < ElementCount(*input); ++i) batch += HostData<const float>(*input)[i];
  for (size_t p = state.values.size(); p-- > 0;) {
    for (size_t i = 0; i < state.values[p].size(); ++i) {
      state.gradients[p][i] += batch * float(p + 1) + 0.5f * state.values[p][i] + 0.001f * float(i);
    }
    if (state.ready != nullptr) state.ready(state.ready_context, uint32_t(p));
  }
  *loss = batch;
  return DPL_OK;
}

// A new instance's memory: parameters of `sizes` elements, element i of parameter p sin(10p + i).
inline std::unique_ptr<FakeModelState> NewState(const std::vector<size_t>& sizes) {
  auto state = std::make_unique<FakeModelState>();
  for (size_t p = 0; p < sizes.size(); ++p) {
    std::vector<float> values(sizes[p]);
    for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(float(p * 10 + i));
    state->values.push_back(values);
    state->gradients.emplace_back(sizes[p], 0.0f);
    state->shapes.push_back(int64_t(sizes[p]));
    state->names.push_back("layer" + std::to_string(p) + (p % 2 == 0 ? ".weight" : ".bias"));
  }
  return state;
}

}  // namespace detail

// read_tensors and write_tensors over every parameter, back to back.
inline void AddHostCopyEntries(plugin_host::ModelInterface* table) {
  auto copy = [](dpl_model* model, dpl_model_tensors which, float* host, uint64_t count,
                 bool read) {
    std::vector<std::vector<float>>& tensors = detail::TensorsOf(detail::StateOf(model), which);
    uint64_t at = 0;
    for (std::vector<float>& tensor : tensors) {
      for (float& element : tensor) {
        if (at == count) return DPL_ERR_INVALID_ARGUMENT;
        if (read) host[at] = element;
        if (!read) element = host[at];
        ++at;
      }
    }
    return at == count ? DPL_OK : DPL_ERR_INVALID_ARGUMENT;
  };
  table->read_tensors = [copy](dpl_model* model, dpl_model_tensors which, float* host,
                               uint64_t count) { return copy(model, which, host, count, true); };
  table->write_tensors = [copy](dpl_model* model, dpl_model_tensors which, const float* host,
                                uint64_t count) {
    return copy(model, which, const_cast<float*>(host), count, false);
  };
}

// An optimizer of the model's own (kDeviceOptimizer): plain SGD where the values are.
inline void AddDeviceOptimizerEntries(plugin_host::ModelInterface* table) {
  table->per_instance = {ModelCapability::kDeviceOptimizer};
  table->capabilities = table->capabilities.With({ModelCapability::kDeviceOptimizer});
  table->described_capabilities = [](const dpl_model_info&) {
    return Result<plugin_host::CapabilitySet<ModelCapability>>(
        plugin_host::CapabilitySet<ModelCapability>{ModelCapability::kDeviceOptimizer});
  };
  table->set_optimizer = [](dpl_model*, const dpl_optimizer_config*) { return DPL_OK; };
  table->gradient_statistics = [](dpl_model*, dpl_gradient_statistics* statistics) {
    statistics->all_finite = 1;
    return DPL_OK;
  };
  // Plain SGD where the values are: value -= rate * factor * gradient.
  table->apply_update = [](dpl_model* model, const dpl_update* update) {
    FakeModelState& state = detail::StateOf(model);
    for (size_t p = 0; p < state.values.size(); ++p) {
      for (size_t i = 0; i < state.values[p].size(); ++i) {
        state.values[p][i] -=
            float(update->learning_rate * update->gradient_factor) * state.gradients[p][i];
      }
    }
    ++state.applied;
    state.factor = update->gradient_factor;
    return DPL_OK;
  };
}

// The plugin, and the memory of every instance it created (in creation order), which outlives
// the instance for the test to read. Every instance starts from the same values.
struct FakeModel {
  ModelPlugin plugin;
  std::shared_ptr<std::vector<std::unique_ptr<FakeModelState>>> instances;
};

inline FakeModel FakeModelPlugin(const FakeModelOptions& options) {
  auto instances = std::make_shared<std::vector<std::unique_ptr<FakeModelState>>>();
  auto table = std::make_shared<plugin_host::ModelInterface>();
  table->abi = "model ABI v4";
  if (options.host_copy) table->capabilities = {ModelCapability::kHostCopy};
  table->create = [options, instances](const dpl_model_config*, dpl_model** out) {
    static std::mutex creating;  // ranks as threads create theirs at once
    std::lock_guard<std::mutex> lock(creating);
    instances->push_back(detail::NewState(options.sizes));
    *out = reinterpret_cast<dpl_model*>(instances->back().get());
    return DPL_OK;
  };
  table->destroy = [](dpl_model*) {};  // the plugin keeps the memory (FakeModel::instances)
  table->describe = [](dpl_model* model, dpl_model_info* info) {
    info->parameter_count = uint32_t(detail::StateOf(model).values.size());
    return DPL_OK;
  };
  table->parameter = [](dpl_model* model, uint32_t index, dpl_parameter* parameter) {
    FakeModelState& state = detail::StateOf(model);
    parameter->name = state.names[index].c_str();
    parameter->value = HostTensor(state.values[index].data(), DLDataType{kDLFloat, 32, 1}, 1,
                                  &state.shapes[index]);
    parameter->gradient = HostTensor(state.gradients[index].data(), DLDataType{kDLFloat, 32, 1}, 1,
                                     &state.shapes[index]);
    return DPL_OK;
  };
  table->set_gradient_ready_callback = [](dpl_model* model, dpl_gradient_ready_fn ready,
                                          void* context) {
    detail::StateOf(model).ready = ready;
    detail::StateOf(model).ready_context = context;
    return DPL_OK;
  };
  table->set_mode = [](dpl_model*, dpl_model_mode) { return DPL_OK; };
  table->zero_gradients = [](dpl_model* model) {
    FakeModelState& state = detail::StateOf(model);
    for (std::vector<float>& gradient : state.gradients)
      std::fill(gradient.begin(), gradient.end(), 0.0f);
    ++state.zeroed;
    return DPL_OK;
  };
  table->train_step = [](dpl_model* model, const DLTensor* input, const DLTensor*, float* loss) {
    return detail::TrainStep(model, input, loss);
  };
  table->last_error = [] { return ""; };
  AddHostCopyEntries(table.get());
  if (options.device_optimizer) AddDeviceOptimizerEntries(table.get());
  return FakeModel{ModelPlugin{table, PluginLabel{"model", "fake", ""}}, instances};
}

// A created instance of `plugin`, and its memory.
inline std::unique_ptr<Model> CreateFakeModel(const ModelPlugin& plugin) {
  dpl_model_config config{};
  config.struct_size = sizeof config;
  Result<std::unique_ptr<Model>> model = Model::Create(plugin, config);
  return model.ok() ? std::move(*model) : nullptr;
}

}  // namespace dpl::training::fakes
