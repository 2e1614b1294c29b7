// Backend ABI v5 (dpl/backend_v5.h) as the newest backend interface: v4's entries and config,
// and the plugin's send_receive.
#include "dpl/backend_v5.h"
#include "plugin_host/adapters/adapter_support.hpp"
#include "plugin_host/adapters/backend_v1.hpp"
#include "plugin_host/adapters/builtin_adapters.hpp"

namespace dpl::plugin_host::adapters {
namespace {

using Table = dpl_backend_plugin_v5;

RequiredEntries Required(const void* table) {
  const auto* t = static_cast<const Table*>(table);
  return Joined({RequiredBackendV1Entries(t),
                 {DPL_REQUIRED_ENTRY(t, synchronize), DPL_REQUIRED_ENTRY(t, reduce_scatter),
                  DPL_REQUIRED_ENTRY(t, abort), DPL_REQUIRED_ENTRY(t, send_receive)}});
}

BackendInterface Adapt(const void* table) {
  const Table& t = TableAt<Table>(table);
  BackendInterface backend;
  backend.create = CreateWithPrefix<dpl_backend_config_v5>(t.create, DPL_BACKEND_ABI_VERSION_5);
  TakeBackendV1Entries(t, &backend);
  backend.synchronize = t.synchronize;
  backend.reduce_scatter = t.reduce_scatter;
  backend.abort = t.abort;
  backend.send_receive = t.send_receive;
  return backend;
}

}  // namespace

Adapter BackendV5Adapter() {
  return MakeAdapter(DPL_BACKEND_ABI_VERSION_5, sizeof(Table),
                     {BackendCapability::kSynchronize, BackendCapability::kLocalAddress,
                      BackendCapability::kReduceScatter, BackendCapability::kAbort,
                      BackendCapability::kSendReceive},
                     &Required, &Adapt);
}

}  // namespace dpl::plugin_host::adapters
