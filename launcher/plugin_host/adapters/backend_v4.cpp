// Backend ABI v4 (dpl/backend_v4.h) as the newest backend interface: v3's entries and config,
// and the plugin's abort, the one entry the host may call from another thread.
#include "dpl/backend_v4.h"
#include "plugin_host/adapters/adapter_support.hpp"
#include "plugin_host/adapters/backend_v1.hpp"
#include "plugin_host/adapters/builtin_adapters.hpp"

namespace dpl::plugin_host::adapters {
namespace {

using Table = dpl_backend_plugin_v4;

RequiredEntries Required(const void* table) {
  const auto* t = static_cast<const Table*>(table);
  return Joined({RequiredBackendV1Entries(t),
                 {DPL_REQUIRED_ENTRY(t, synchronize), DPL_REQUIRED_ENTRY(t, reduce_scatter),
                  DPL_REQUIRED_ENTRY(t, abort)}});
}

BackendInterface Adapt(const void* table) {
  const Table& t = TableAt<Table>(table);
  BackendInterface backend;
  backend.create = CreateWithPrefix<dpl_backend_config_v4>(t.create, DPL_BACKEND_ABI_VERSION_4);
  TakeBackendV1Entries(t, &backend);
  backend.synchronize = t.synchronize;
  backend.reduce_scatter = t.reduce_scatter;
  backend.abort = t.abort;
  return backend;
}

}  // namespace

Adapter BackendV4Adapter() {
  return MakeAdapter(DPL_BACKEND_ABI_VERSION_4, sizeof(Table),
                     {BackendCapability::kSynchronize, BackendCapability::kLocalAddress,
                      BackendCapability::kReduceScatter, BackendCapability::kAbort},
                     &Required, &Adapt);
}

}  // namespace dpl::plugin_host::adapters
