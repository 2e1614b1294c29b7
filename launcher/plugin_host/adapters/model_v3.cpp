// Model ABI v3 (dpl/model_v3.h) as the newest model interface: the data's shape, autocast,
// buffers, random state, two host batch slots, the compute stream, Python-readable state files
// and loss scaling.
#include "dpl/model_v3.h"
#include "plugin_host/adapters/builtin_adapters.hpp"
#include "plugin_host/adapters/model_v1.hpp"
#include "plugin_host/adapters/model_v2.hpp"

namespace dpl::plugin_host::adapters {
namespace {

using Table = dpl_model_plugin_v3;

RequiredEntries Required(const void* table) {
  const auto* t = static_cast<const Table*>(table);
  return Joined({{DPL_REQUIRED_ENTRY(t, buffer), DPL_REQUIRED_ENTRY(t, read_buffers),
                  DPL_REQUIRED_ENTRY(t, write_buffers), DPL_REQUIRED_ENTRY(t, rng_state),
                  DPL_REQUIRED_ENTRY(t, set_rng_state), DPL_REQUIRED_ENTRY(t, host_batch_slot)},
                 RequiredHostCopyEntries(t),
                 RequiredModelV1Entries(t),
                 {DPL_REQUIRED_ENTRY(t, set_loss_scale)}});
}

ModelInterface Adapt(const void* table) {
  const Table& t = TableAt<Table>(table);
  ModelInterface model;
  model.create = CreateWithPrefix<dpl_model_config_v3>(t.create, DPL_MODEL_ABI_VERSION_3);
  model.describe = DescribeWidened<dpl_model_info_v3>(t.describe);
  TakeModelV1Entries(t, &model);
  TakeHostCopyEntries(t, &model);
  model.buffer = t.buffer;
  model.read_buffers = t.read_buffers;
  model.write_buffers = t.write_buffers;
  model.rng_state = t.rng_state;
  model.set_rng_state = t.set_rng_state;
  model.host_batch_slot = t.host_batch_slot;
  model.set_loss_scale = t.set_loss_scale;
  return model;
}

}  // namespace

Adapter ModelV3Adapter() {
  return MakeAdapter(
      DPL_MODEL_ABI_VERSION_3, sizeof(Table),
      {ModelCapability::kHostCopy, ModelCapability::kHostBatchSlots, ModelCapability::kBuffers,
       ModelCapability::kRngState, ModelCapability::kAutocast, ModelCapability::kLossScale,
       ModelCapability::kDeviceStream, ModelCapability::kStateFiles, ModelCapability::kDataShape},
      &Required, &Adapt);
}

}  // namespace dpl::plugin_host::adapters
