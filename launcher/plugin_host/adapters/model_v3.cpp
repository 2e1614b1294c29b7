// Model ABI v3 (dpl/model_v3.h) as the newest model interface: the data's shape, autocast,
// buffers, random state, two host batch slots, the compute stream, Python-readable state files
// and loss scaling; class labels (Note [Class labels before model ABI v4]).
#include "plugin_host/adapters/model_v3.hpp"

#include "dpl/model_v3.h"
#include "plugin_host/adapters/builtin_adapters.hpp"

namespace dpl::plugin_host::adapters {
namespace {

using Table = dpl_model_plugin_v3;

RequiredEntries Required(const void* table) {
  return RequiredModelV3Entries(static_cast<const Table*>(table));
}

ModelInterface Adapt(const void* table) {
  const Table& t = TableAt<Table>(table);
  ModelInterface model;
  model.create = CreateWithPrefix<dpl_model_config_v3>(t.create, DPL_MODEL_ABI_VERSION_3);
  model.describe = DescribeWithClassLabels<dpl_model_info_v3>(t.describe);
  TakeModelV1Entries(t, &model);
  TakeEvalStepPerSample(t, &model);
  TakeHostCopyEntries(t, &model);
  TakeModelV3Entries(t, &model);
  model.per_instance = kModelV3PerInstance;
  model.described_capabilities = [](const dpl_model_info& info) {
    return Result<CapabilitySet<ModelCapability>>(ModelV3Described(info));
  };
  return model;
}

}  // namespace

Adapter ModelV3Adapter() {
  return MakeAdapter(DPL_MODEL_ABI_VERSION_3, sizeof(Table), kModelV3Capabilities, &Required,
                     &Adapt);
}

}  // namespace dpl::plugin_host::adapters
