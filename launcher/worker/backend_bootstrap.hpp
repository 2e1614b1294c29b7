// Creating a worker's communication backend: its config from the worker's identity and the
// options, its own view of the store, and the fallback of a host backend for a GPU model.
#pragma once

#include <memory>

#include "cli/options.hpp"
#include "common/status.hpp"
#include "plugin_host/plugin_host.hpp"
#include "rendezvous/store.hpp"
#include "training/collectives/backend.hpp"
#include "training/worker_identity.hpp"

namespace dpl::worker {

// A connected backend, and the store view it holds on to (valid while this lives); with several
// machines summing through shared memory, the instance of this local rank's workers on every
// machine as well.
struct ConnectedBackend {
  plugin_host::LoadedPlugin plugin;  // whose instance it is
  std::unique_ptr<rendezvous::PluginStoreView> store_view;
  std::unique_ptr<training::Backend> backend;
  std::unique_ptr<rendezvous::PluginStoreView> across_machines_store_view;
  std::unique_ptr<training::Backend> across_machines;
  // Beside a backend of device memory only, in a job that may regroup in place: an instance of a
  // backend of host memory among the same ranks (Note [A host path beside a device backend] in
  // training/collectives/collectives.cpp).
  std::unique_ptr<rendezvous::PluginStoreView> host_path_store_view;
  std::unique_ptr<training::Backend> host_path;
};

// Creates and connects `plugin` for this worker, blocking up to --backend-timeout. A backend that
// moves host memory only (gloo, tcp) refuses a CUDA device; it is then created for host memory,
// where the GPU model's gradients are summed (Note [Host copy of the parameters]).
Result<ConnectedBackend> StartBackend(const plugin_host::LoadedPlugin& plugin,
                                      const cli::Options& options,
                                      const training::WorkerIdentity& identity,
                                      rendezvous::StoreClient& store, const std::string& prefix);

// Adds to `connected` the instance of `plugin` among the workers of this local rank on every
// machine (rank = machine id), keys under its own prefix of the store: what a worker's part of the
// gradients crosses machines through (Note [Reduction through shared memory]).
Status StartBackendAcrossMachines(const plugin_host::LoadedPlugin& plugin,
                                  const cli::Options& options,
                                  const training::WorkerIdentity& identity,
                                  rendezvous::StoreClient& store, const std::string& prefix,
                                  ConnectedBackend* connected);

// Whether `backend` needs a host path for a job that may regroup in place: it moves device memory
// only and can abort (without abort the worker cannot go on in place anyway).
bool NeedsHostPath(const training::Backend& backend);

// Adds to `connected` the instance of `plugin` (a backend of host memory: gloo, tcp) for host
// memory among the ranks of `identity`, keys under its own prefix of the store, with none of the
// job's --backend-options (they are the device backend's).
Status StartHostPath(const plugin_host::LoadedPlugin& plugin, const cli::Options& options,
                     const training::WorkerIdentity& identity, rendezvous::StoreClient& store,
                     const std::string& prefix, ConnectedBackend* connected);

}  // namespace dpl::worker
