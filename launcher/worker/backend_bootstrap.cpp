#include "worker/backend_bootstrap.hpp"

#include <algorithm>

#include "cluster/machine_ids.hpp"
#include "common/log.hpp"

namespace dpl::worker {

Result<ConnectedBackend> StartBackend(const plugin_host::LoadedPlugin& plugin,
                                      const cli::Options& options,
                                      const training::WorkerIdentity& identity,
                                      rendezvous::StoreClient& store, const std::string& prefix) {
  ConnectedBackend connected;
  // The address of the interface that routes to machine 0, which the peers can reach.
  const std::string local_address = cluster::SourceAddressTowards(options.master_addr);
  connected.store_view =
      std::make_unique<rendezvous::PluginStoreView>(store, prefix + "backend/" + plugin.name + "/");
  dpl_backend_config_v2 config{};
  config.struct_size = sizeof config;
  config.version = plugin.abi_version;
  config.rank = identity.rank;
  config.world_size = identity.world_size;
  config.local_rank = identity.local_rank;
  config.local_world_size = identity.local_world_size;
  config.device_type = identity.device_type;
  config.device_id = identity.device_id;
  config.timeout_ms = std::max<int64_t>(1, options.backend_timeout.count());
  config.store = connected.store_view->view();
  config.log = &log::PluginLogCallback;
  config.log_context = nullptr;
  config.options = options.backend_options.c_str();
  config.local_address = local_address.c_str();
  dpl_backend* instance = nullptr;
  auto create = [&] {
    if (plugin.backend_v2 != nullptr) return plugin.backend_v2->create(&config, &instance);
    dpl_backend_config_v1 older{};  // the v1 prefix of the config
    older.struct_size = sizeof older;
    older.version = DPL_BACKEND_ABI_VERSION_1;
    older.rank = config.rank;
    older.world_size = config.world_size;
    older.local_rank = config.local_rank;
    older.local_world_size = config.local_world_size;
    older.device_type = config.device_type;
    older.device_id = config.device_id;
    older.timeout_ms = config.timeout_ms;
    older.store = config.store;
    older.log = config.log;
    older.log_context = config.log_context;
    older.options = config.options;
    return plugin.backend_v1->create(&older, &instance);
  };
  dpl_status created = create();
  if (config.device_type == kDLCUDA && created == DPL_ERR_UNSUPPORTED) {
    if (identity.rank == 0) {
      log::Info("backend " + plugin.name +
                " moves host memory only; the GPU model's gradients are summed in host memory");
    }
    config.device_type = kDLCPU;
    config.device_id = 0;
    created = create();
  }
  if (created != DPL_OK || instance == nullptr) {
    return plugin_host::DescribeCallFailure(plugin, "create",
                                            created == DPL_OK ? DPL_ERR_INTERNAL : created)
        .WithContext("backend " + plugin.name + " failed to start");
  }
  const training::BackendFunctions functions =
      plugin.backend_v2 != nullptr ? training::BackendFunctions::Of(*plugin.backend_v2)
                                   : training::BackendFunctions::Of(*plugin.backend_v1);
  connected.backend = std::make_unique<training::Backend>(
      functions, instance, plugin_host::LabelOf(plugin), config.device_type);
  return connected;
}

}  // namespace dpl::worker
