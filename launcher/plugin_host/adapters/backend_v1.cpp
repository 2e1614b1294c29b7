// Backend ABI v1 (dpl/backend_v1.h) as the newest backend interface.
//
// Note [Adapting backend ABI v1]: later versions kept every v1 entry with its type; v2 appended
// synchronize and the config's local_address. A v1 plugin gets the v1 prefix of the config. Its
// collectives are complete in stream order when they return, so its synchronize returns at once.
#include "plugin_host/adapters/backend_v1.hpp"

#include "dpl/backend_v1.h"
#include "plugin_host/adapters/adapter_support.hpp"
#include "plugin_host/adapters/builtin_adapters.hpp"

namespace dpl::plugin_host::adapters {
namespace {

using Table = dpl_backend_plugin_v1;

RequiredEntries Required(const void* table) {
  return RequiredBackendV1Entries(static_cast<const Table*>(table));
}

BackendInterface Adapt(const void* table) {
  const Table& t = TableAt<Table>(table);
  BackendInterface backend;
  backend.create = CreateWithPrefix<dpl_backend_config_v1>(t.create, DPL_BACKEND_ABI_VERSION_1);
  TakeBackendV1Entries(t, &backend);
  backend.synchronize = [](dpl_backend*, void*) { return DPL_OK; };
  return backend;
}

}  // namespace

Adapter BackendV1Adapter() {
  return MakeAdapter(DPL_BACKEND_ABI_VERSION_1, sizeof(Table), {}, &Required, &Adapt);
}

}  // namespace dpl::plugin_host::adapters
