// Backend ABI v3 (dpl/backend_v3.h) as the newest backend interface: v2's entries and config,
// and the plugin's own reduce_scatter and in-place allgather. It has no abort (v4): the entry
// stays empty and the capability missing.
#include "dpl/backend_v3.h"
#include "plugin_host/adapters/adapter_support.hpp"
#include "plugin_host/adapters/backend_v1.hpp"
#include "plugin_host/adapters/builtin_adapters.hpp"

namespace dpl::plugin_host::adapters {
namespace {

using Table = dpl_backend_plugin_v3;

RequiredEntries Required(const void* table) {
  const auto* t = static_cast<const Table*>(table);
  return Joined({RequiredBackendV1Entries(t),
                 {DPL_REQUIRED_ENTRY(t, synchronize), DPL_REQUIRED_ENTRY(t, reduce_scatter)}});
}

BackendInterface Adapt(const void* table) {
  const Table& t = TableAt<Table>(table);
  BackendInterface backend;
  backend.create = CreateWithPrefix<dpl_backend_config_v3>(t.create, DPL_BACKEND_ABI_VERSION_3);
  TakeBackendV1Entries(t, &backend);
  backend.synchronize = t.synchronize;
  backend.reduce_scatter = t.reduce_scatter;
  return backend;
}

}  // namespace

Adapter BackendV3Adapter() {
  return MakeAdapter(DPL_BACKEND_ABI_VERSION_3, sizeof(Table),
                     {BackendCapability::kSynchronize, BackendCapability::kLocalAddress,
                      BackendCapability::kReduceScatter},
                     &Required, &Adapt);
}

}  // namespace dpl::plugin_host::adapters
