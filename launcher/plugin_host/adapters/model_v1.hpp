// What the model adapters take from model ABI v1 (model_v1.cpp): the entries v1 defined and later
// versions kept with their types, create and describe for a plugin that knows v1's config and
// info (ABI v1 and v2, whose config and info are v1's), and the bridge of the samples every
// version before v4 takes (Note [Class labels before model ABI v4]).
#pragma once

#include <algorithm>

#include "dpl/model_v1.h"
#include "plugin_host/adapters/adapter_support.hpp"
#include "plugin_host/model_interface.hpp"

namespace dpl::plugin_host::adapters {

// The entries v1 defined, in its order, of `table` (a model table of ABI v1 or later).
template <typename Table>
RequiredEntries RequiredModelV1Entries(const Table* t) {
  return {DPL_REQUIRED_ENTRY(t, create),
          DPL_REQUIRED_ENTRY(t, destroy),
          DPL_REQUIRED_ENTRY(t, describe),
          DPL_REQUIRED_ENTRY(t, parameter),
          DPL_REQUIRED_ENTRY(t, set_gradient_ready_callback),
          DPL_REQUIRED_ENTRY(t, set_mode),
          DPL_REQUIRED_ENTRY(t, zero_gradients),
          DPL_REQUIRED_ENTRY(t, train_step),
          DPL_REQUIRED_ENTRY(t, eval_step),
          DPL_REQUIRED_ENTRY(t, save_state),
          DPL_REQUIRED_ENTRY(t, load_state),
          DPL_REQUIRED_ENTRY(t, last_error)};
}

// Every entry of `table` (a model table of ABI v1 or later) that v1 defined, except create,
// describe and eval_step (whose result v4 changed).
template <typename Table>
void TakeModelV1Entries(const Table& table, ModelInterface* model) {
  model->destroy = table.destroy;
  model->parameter = table.parameter;
  model->set_gradient_ready_callback = table.set_gradient_ready_callback;
  model->set_mode = table.set_mode;
  model->zero_gradients = table.zero_gradients;
  model->train_step = table.train_step;
  model->save_state = table.save_state;
  model->load_state = table.load_state;
  model->last_error = table.last_error;
}

// Note [Class labels before model ABI v4]: a plugin of ABI v1 to v3 takes a float32 batch of its
// input_shape and one int64 class label per sample; its train_step's loss is the mean over the
// samples, which are the target elements. The adapter describes exactly that as typed samples
// (describe's input and target) and turns eval_step's (loss_sum, correct) into the newest result
// with one element per sample. The host gives such a plugin no other data.
inline void DescribeClassLabels(dpl_model_info* info) {
  info->input = dpl_sample_tensor_v2{};
  info->input.dtype = DLDataType{kDLFloat, 32, 1};
  info->input.ndim = std::min<uint32_t>(info->input_ndim, DPL_DATASET_MAX_SAMPLE_DIMS);
  std::copy(info->input_shape, info->input_shape + info->input.ndim, info->input.shape);
  info->target = dpl_sample_tensor_v2{};
  info->target.dtype = DLDataType{kDLInt, 64, 1};
}

// An older plugin's describe: its OwnInfo read into the newest info, with DescribeClassLabels.
template <typename OwnInfo, typename Describe>
auto DescribeWithClassLabels(Describe describe) {
  return [widened = DescribeWidened<OwnInfo>(describe)](dpl_model* instance, dpl_model_info* info) {
    const dpl_status status = widened(instance, info);
    DescribeClassLabels(info);
    return status;
  };
}

// An older plugin's eval_step (loss sum, correct samples) as the newest one: one element per
// sample of the (n) labels.
template <typename Table>
void TakeEvalStepPerSample(const Table& table, ModelInterface* model) {
  model->eval_step = [eval_step = table.eval_step](dpl_model* instance, const DLTensor* input,
                                                   const DLTensor* target,
                                                   dpl_eval_result* result) {
    double loss_sum = 0.0;
    int64_t correct = 0;
    const dpl_status status = eval_step(instance, input, target, &loss_sum, &correct);
    result->loss_sum = loss_sum;
    result->correct = correct;
    result->elements =
        target != nullptr && target->ndim >= 1 && target->shape != nullptr ? target->shape[0] : 0;
    return status;
  };
}

// create hands the plugin the v1 prefix of the config (version `abi_version`; v1's `reserved`,
// where v3 put the rank, 0); describe reads v1's info into the newest one (no buffers, no flags,
// the legacy default stream, class labels); eval_step counts samples.
template <typename Table>
void TakeModelV1ConfigAndInfo(const Table& table, uint32_t abi_version, ModelInterface* model) {
  model->create = [create = table.create, abi_version](const dpl_model_config* config,
                                                       dpl_model** out) {
    dpl_model_config_v1 own = PrefixOf<dpl_model_config_v1>(*config);
    own.version = abi_version;
    own.reserved = 0;
    return create(&own, out);
  };
  model->describe = DescribeWithClassLabels<dpl_model_info_v1>(table.describe);
  TakeEvalStepPerSample(table, model);
}

}  // namespace dpl::plugin_host::adapters
