// Model ABI v99 (model_v99.h) as the newest model interface: the config and info rearranged (its
// samples: float32 with one class label each), one `step` split into train_step and eval_step
// (an element per sample), the random state as bytes.
#include "model_abi_v99/model_v99_adapter.hpp"

#include <cstring>
#include <vector>

#include "model_abi_v99/model_v99.h"
#include "plugin_host/adapters/adapter_support.hpp"

namespace dpl::plugin_host::testing {
namespace {

using Table = dpl_model_plugin_v99;

RequiredEntries Required(const void* table) {
  const auto* t = static_cast<const Table*>(table);
  return {DPL_REQUIRED_ENTRY(t, last_error),     DPL_REQUIRED_ENTRY(t, create),
          DPL_REQUIRED_ENTRY(t, destroy),        DPL_REQUIRED_ENTRY(t, describe),
          DPL_REQUIRED_ENTRY(t, parameter),      DPL_REQUIRED_ENTRY(t, set_gradient_ready_callback),
          DPL_REQUIRED_ENTRY(t, zero_gradients), DPL_REQUIRED_ENTRY(t, step),
          DPL_REQUIRED_ENTRY(t, save_state),     DPL_REQUIRED_ENTRY(t, load_state),
          DPL_REQUIRED_ENTRY(t, random_state),   DPL_REQUIRED_ENTRY(t, set_random_state)};
}

dpl_model_config_v99 ConfigV99(const dpl_model_config& config) {
  dpl_model_config_v99 own{};
  own.struct_size = sizeof own;
  own.version = DPL_MODEL_ABI_VERSION_99;
  own.seed = config.seed;
  own.options = config.options;
  own.num_threads = config.num_threads;
  own.rank = config.rank;
  own.sample_ndim = config.input_ndim;
  std::memcpy(own.sample_shape, config.input_shape, sizeof own.sample_shape);
  own.num_classes = config.num_classes;
  own.log = config.log;
  own.log_context = config.log_context;
  return own;
}

// v99 takes float32 samples and one int64 class label each, as the newest info says.
dpl_model_info InfoOf(const dpl_model_info_v99& own) {
  dpl_model_info info{};
  info.struct_size = sizeof info;
  info.input_ndim = own.sample_ndim;
  std::memcpy(info.input_shape, own.sample_shape, sizeof info.input_shape);
  info.num_classes = own.num_classes;
  info.parameter_count = own.parameter_count;
  info.input.dtype = DLDataType{kDLFloat, 32, 1};
  info.input.ndim = own.sample_ndim;
  std::memcpy(info.input.shape, own.sample_shape, sizeof info.input.shape);
  info.target.dtype = DLDataType{kDLInt, 64, 1};
  return info;
}

// One `step` of `mode`: the per-sample losses summed into *loss_sum.
dpl_status StepSum(decltype(Table::step) step, dpl_model* model, dpl_model_mode mode,
                   const DLTensor* input, const DLTensor* labels, double* loss_sum,
                   int64_t* correct) {
  std::vector<float> losses(size_t(labels->shape[0]), 0.0f);
  const dpl_status status = step(model, mode, input, labels, losses.data(), correct);
  *loss_sum = 0.0;
  for (float loss : losses) *loss_sum += loss;
  return status;
}

void TakeSteps(const Table& t, ModelInterface* model) {
  model->set_mode = [](dpl_model*, dpl_model_mode) { return DPL_OK; };  // given with each step
  model->train_step = [step = t.step](dpl_model* instance, const DLTensor* input,
                                      const DLTensor* labels, float* loss) {
    double sum = 0.0;
    int64_t correct = 0;
    const dpl_status status =
        StepSum(step, instance, DPL_MODEL_MODE_TRAIN, input, labels, &sum, &correct);
    *loss = labels->shape[0] > 0 ? float(sum / double(labels->shape[0])) : 0.0f;
    return status;
  };
  model->eval_step = [step = t.step](dpl_model* instance, const DLTensor* input,
                                     const DLTensor* labels, dpl_eval_result* result) {
    result->elements = labels->shape[0];
    return StepSum(step, instance, DPL_MODEL_MODE_EVAL, input, labels, &result->loss_sum,
                   &result->correct);
  };
}

void TakeRandomState(const Table& t, ModelInterface* model) {
  model->rng_state = [get = t.random_state](dpl_model* instance, void* state, uint64_t capacity,
                                            uint64_t* size) {
    *size = sizeof(uint64_t);
    if (capacity < *size) return DPL_ERR_BUFFER_TOO_SMALL;
    uint64_t value = 0;
    const dpl_status status = get(instance, &value);
    std::memcpy(state, &value, sizeof value);
    return status;
  };
  model->set_rng_state = [set = t.set_random_state](dpl_model* instance, const void* state,
                                                    uint64_t size) {
    if (size != sizeof(uint64_t)) return DPL_ERR_INVALID_ARGUMENT;
    uint64_t value = 0;
    std::memcpy(&value, state, sizeof value);
    return set(instance, value);
  };
}

ModelInterface Adapt(const void* table) {
  const Table& t = adapters::TableAt<Table>(table);
  ModelInterface model;
  model.create = [create = t.create](const dpl_model_config* config, dpl_model** out) {
    const dpl_model_config_v99 own = ConfigV99(*config);
    return create(&own, out);
  };
  model.destroy = t.destroy;
  model.describe = [describe = t.describe](dpl_model* instance, dpl_model_info* info) {
    dpl_model_info_v99 own{};
    own.struct_size = sizeof own;
    const dpl_status status = describe(instance, &own);
    *info = InfoOf(own);
    return status;
  };
  model.parameter = t.parameter;
  model.set_gradient_ready_callback = t.set_gradient_ready_callback;
  model.zero_gradients = t.zero_gradients;
  TakeSteps(t, &model);
  model.save_state = t.save_state;
  model.load_state = t.load_state;
  model.last_error = t.last_error;
  TakeRandomState(t, &model);
  return model;
}

}  // namespace

Adapter ModelV99Adapter() {
  return MakeAdapter(DPL_MODEL_ABI_VERSION_99, sizeof(Table),
                     {ModelCapability::kRngState, ModelCapability::kDataShape}, &Required, &Adapt);
}

}  // namespace dpl::plugin_host::testing
