// Backend ABI v2 (dpl/backend_v2.h) as the newest backend interface: device collectives ordered
// after the producing stream and synchronize; the config's local_address. reduce_scatter and
// in-place allgather are made of its collectives (Note [Collectives older backends lack]).
#include "dpl/backend_v2.h"
#include "plugin_host/adapters/adapter_support.hpp"
#include "plugin_host/adapters/backend_v1.hpp"
#include "plugin_host/adapters/builtin_adapters.hpp"

namespace dpl::plugin_host::adapters {
namespace {

using Table = dpl_backend_plugin_v2;

RequiredEntries Required(const void* table) {
  const auto* t = static_cast<const Table*>(table);
  return Joined({RequiredBackendV1Entries(t), {DPL_REQUIRED_ENTRY(t, synchronize)}});
}

BackendInterface Adapt(const void* table) {
  const Table& t = TableAt<Table>(table);
  BackendInterface backend;
  backend.create = CreateWithPrefix<dpl_backend_config_v2>(t.create, DPL_BACKEND_ABI_VERSION_2);
  TakeBackendV1Entries(t, &backend);
  backend.synchronize = t.synchronize;
  AddCollectivesOfV3(&backend);
  return backend;
}

}  // namespace

Adapter BackendV2Adapter() {
  return MakeAdapter(DPL_BACKEND_ABI_VERSION_2, sizeof(Table),
                     {BackendCapability::kSynchronize, BackendCapability::kLocalAddress}, &Required,
                     &Adapt);
}

}  // namespace dpl::plugin_host::adapters
