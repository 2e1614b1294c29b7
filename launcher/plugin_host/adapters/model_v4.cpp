// Model ABI v4 (dpl/model_v4.h) as the newest model interface: typed samples, the evaluation
// result per target element, and the optimizer on the model's device where the plugin has it.
#include "dpl/model_v4.h"
#include "plugin_host/adapters/builtin_adapters.hpp"
#include "plugin_host/adapters/model_v3.hpp"

namespace dpl::plugin_host::adapters {
namespace {

using Table = dpl_model_plugin_v4;

// set_optimizer, gradient_statistics and apply_update are optional: NULL unless the plugin says
// DPL_MODEL_DEVICE_OPTIMIZER (training::Model checks the two agree); share_parameters and
// share_gradients are optional and may be beyond the table's end.
RequiredEntries Required(const void* table) {
  return RequiredModelV3Entries(static_cast<const Table*>(table));
}

ModelInterface Adapt(const void* table) {
  const Table& t = TableAt<Table>(table);
  ModelInterface model;
  model.create = CreateWithPrefix<dpl_model_config_v4>(t.create, DPL_MODEL_ABI_VERSION_4);
  model.describe = t.describe;
  TakeModelV1Entries(t, &model);
  model.eval_step = t.eval_step;
  TakeHostCopyEntries(t, &model);
  TakeModelV3Entries(t, &model);
  if (t.set_optimizer != nullptr) model.set_optimizer = t.set_optimizer;
  if (t.gradient_statistics != nullptr) model.gradient_statistics = t.gradient_statistics;
  if (t.apply_update != nullptr) model.apply_update = t.apply_update;
  // A table from before share_parameters ends where it begins.
  if (t.header.struct_size >= sizeof(Table)) {
    if (t.share_parameters != nullptr) model.share_parameters = t.share_parameters;
    if (t.share_gradients != nullptr) model.share_gradients = t.share_gradients;
  }
  return model;
}

}  // namespace

Adapter ModelV4Adapter() {
  return MakeAdapter(DPL_MODEL_ABI_VERSION_4, DPL_MODEL_PLUGIN_V4_FIRST_SIZE,
                     kModelV3Capabilities.With(
                         {ModelCapability::kTypedSamples, ModelCapability::kDeviceOptimizer}),
                     &Required, &Adapt);
}

}  // namespace dpl::plugin_host::adapters
