// What the model adapters take from model ABI v1 (model_v1.cpp): the entries v1 defined and later
// versions kept with their types, and create and describe for a plugin that knows v1's config and
// info (ABI v1 and v2, whose config and info are v1's).
#pragma once

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

// Every entry of `table` (a model table of ABI v1 or later) that v1 defined, except create and
// describe.
template <typename Table>
void TakeModelV1Entries(const Table& table, ModelInterface* model) {
  model->destroy = table.destroy;
  model->parameter = table.parameter;
  model->set_gradient_ready_callback = table.set_gradient_ready_callback;
  model->set_mode = table.set_mode;
  model->zero_gradients = table.zero_gradients;
  model->train_step = table.train_step;
  model->eval_step = table.eval_step;
  model->save_state = table.save_state;
  model->load_state = table.load_state;
  model->last_error = table.last_error;
}

// create hands the plugin the v1 prefix of the config (version `abi_version`; v1's `reserved`,
// where v3 put the rank, 0); describe reads v1's info into the newest one (no buffers, no flags,
// the legacy default stream).
template <typename Table>
void TakeModelV1ConfigAndInfo(const Table& table, uint32_t abi_version, ModelInterface* model) {
  model->create = [create = table.create, abi_version](const dpl_model_config* config,
                                                       dpl_model** out) {
    dpl_model_config_v1 own = PrefixOf<dpl_model_config_v1>(*config);
    own.version = abi_version;
    own.reserved = 0;
    return create(&own, out);
  };
  model->describe = DescribeWidened<dpl_model_info_v1>(table.describe);
}

}  // namespace dpl::plugin_host::adapters
