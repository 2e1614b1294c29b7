// Model ABI v2 (dpl/model_v2.h) as the newest model interface: v1's config and info, and the
// host copy (host_batch, read_tensors, write_tensors).
#include "dpl/model_v2.h"
#include "plugin_host/adapters/builtin_adapters.hpp"
#include "plugin_host/adapters/model_v1.hpp"
#include "plugin_host/adapters/model_v2.hpp"

namespace dpl::plugin_host::adapters {
namespace {

using Table = dpl_model_plugin_v2;

RequiredEntries Required(const void* table) {
  const auto* t = static_cast<const Table*>(table);
  return Joined({RequiredHostCopyEntries(t), RequiredModelV1Entries(t)});
}

ModelInterface Adapt(const void* table) {
  const Table& t = TableAt<Table>(table);
  ModelInterface model;
  TakeModelV1ConfigAndInfo(t, DPL_MODEL_ABI_VERSION_2, &model);
  TakeModelV1Entries(t, &model);
  TakeHostCopyEntries(t, &model);
  return model;
}

}  // namespace

Adapter ModelV2Adapter() {
  return MakeAdapter(DPL_MODEL_ABI_VERSION_2, sizeof(Table), {ModelCapability::kHostCopy},
                     &Required, &Adapt);
}

}  // namespace dpl::plugin_host::adapters
