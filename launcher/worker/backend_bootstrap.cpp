#include "worker/backend_bootstrap.hpp"

#include <algorithm>

#include "cluster/machine_ids.hpp"
#include "common/log.hpp"

namespace dpl::worker {

namespace {

// The config of this worker's backend (the plugin's adapter sets its struct_size and version).
// Points into `options`, `local_address` and the store view, which must outlive its use.
dpl_backend_config BackendConfig(const cli::Options& options,
                                 const training::WorkerIdentity& identity,
                                 const rendezvous::PluginStoreView& store_view,
                                 const std::string& local_address) {
  dpl_backend_config config{};
  config.struct_size = sizeof config;
  config.rank = identity.rank;
  config.world_size = identity.world_size;
  config.local_rank = identity.local_rank;
  config.local_world_size = identity.local_world_size;
  config.device_type = identity.device_type;
  config.device_id = identity.device_id;
  config.timeout_ms = std::max<int64_t>(1, options.backend_timeout.count());
  config.store = store_view.view();
  config.log = &log::PluginLogCallback;
  config.log_context = nullptr;
  config.options = options.backend_options.c_str();
  config.local_address = local_address.c_str();
  return config;
}

// Creates `plugin` for `identity` with the store keys under `view_prefix`, and `plugin_options`
// (--backend-options for the job's backend).
Status Start(const plugin_host::LoadedPlugin& plugin, const cli::Options& options,
             const training::WorkerIdentity& identity, rendezvous::StoreClient& store,
             const std::string& view_prefix, const std::string& plugin_options,
             std::unique_ptr<rendezvous::PluginStoreView>* store_view,
             std::unique_ptr<training::Backend>* backend) {
  // The address of the interface that routes to machine 0, which the peers can reach.
  const std::string local_address = cluster::SourceAddressTowards(options.master_addr);
  *store_view = std::make_unique<rendezvous::PluginStoreView>(store, view_prefix);
  dpl_backend_config config = BackendConfig(options, identity, **store_view, local_address);
  config.options = plugin_options.c_str();
  dpl_backend* instance = nullptr;
  dpl_status created = plugin.backend->create(&config, &instance);
  if (config.device_type == kDLCUDA && created == DPL_ERR_UNSUPPORTED) {
    if (identity.rank == 0) {
      log::Info("backend " + plugin.name +
                " moves host memory only; the GPU model's gradients are summed in host memory");
    }
    config.device_type = kDLCPU;
    config.device_id = 0;
    created = plugin.backend->create(&config, &instance);
  }
  if (created != DPL_OK || instance == nullptr) {
    return plugin_host::DescribeCallFailure(plugin, "create",
                                            created == DPL_OK ? DPL_ERR_INTERNAL : created)
        .WithContext("backend " + plugin.name + " failed to start");
  }
  *backend = std::make_unique<training::Backend>(plugin.backend, instance,
                                                 plugin_host::LabelOf(plugin), config.device_type);
  return Status::Ok();
}

}  // namespace

Result<ConnectedBackend> StartBackend(const plugin_host::LoadedPlugin& plugin,
                                      const cli::Options& options,
                                      const training::WorkerIdentity& identity,
                                      rendezvous::StoreClient& store, const std::string& prefix) {
  ConnectedBackend connected;
  connected.plugin = plugin;
  DPL_RETURN_IF_ERROR(Start(plugin, options, identity, store,
                            prefix + "backend/" + plugin.name + "/", options.backend_options,
                            &connected.store_view, &connected.backend));
  return connected;
}

Status StartBackendAcrossMachines(const plugin_host::LoadedPlugin& plugin,
                                  const cli::Options& options,
                                  const training::WorkerIdentity& identity,
                                  rendezvous::StoreClient& store, const std::string& prefix,
                                  ConnectedBackend* connected) {
  training::WorkerIdentity across = identity;
  across.rank = options.machine_id;
  across.world_size = options.num_machines;
  across.local_rank = 0;
  across.local_world_size = 1;
  const std::string view_prefix = prefix + "backend-across-machines/local-rank-" +
                                  std::to_string(identity.local_rank) + "/" + plugin.name + "/";
  return Start(plugin, options, across, store, view_prefix, options.backend_options,
               &connected->across_machines_store_view, &connected->across_machines)
      .WithContext("the sums of local rank " + std::to_string(identity.local_rank) +
                   " across machines");
}

bool NeedsHostPath(const training::Backend& backend) {
  return backend.device_type() != kDLCPU && backend.CanAbort();
}

Status StartHostPath(const plugin_host::LoadedPlugin& plugin, const cli::Options& options,
                     const training::WorkerIdentity& identity, rendezvous::StoreClient& store,
                     const std::string& prefix, ConnectedBackend* connected) {
  training::WorkerIdentity host = identity;
  host.device_type = kDLCPU;
  host.device_id = 0;
  DPL_RETURN_IF_ERROR(
      Start(plugin, options, host, store, prefix + "backend-host-path/" + plugin.name + "/",
            /*plugin_options=*/"", &connected->host_path_store_view, &connected->host_path)
          .WithContext("the host path beside backend " + connected->plugin.name));
  // Created for host memory, it moves host memory (Start falls back only from a CUDA device).
  if (!connected->host_path->CanAbort()) {
    connected->host_path.reset();
    return Status::InvalidArgument("backend " + plugin.name +
                                   " cannot be the host path: it cannot abort a collective "
                                   "(backend ABI v4)");
  }
  return Status::Ok();
}

}  // namespace dpl::worker
