#include "worker/worker_session.hpp"

#include <sys/prctl.h>

#include <algorithm>
#include <cstdlib>

#include "common/log.hpp"
#include "rendezvous/join.hpp"
#include "rendezvous/store.hpp"
#include "training/replica_check.hpp"
#include "training/trainer.hpp"
#include "worker/backend_bootstrap.hpp"
#include "worker/device_policy.hpp"
#include "worker/local_memory.hpp"
#include "worker/preemption_signals.hpp"
#include "worker/selftest.hpp"
#include "worker/step_time_exchange.hpp"
#include "worker/store_client_options.hpp"
#include "worker/worker.hpp"
#include "worker/worker_observability.hpp"

namespace dpl::worker {
namespace {

// This worker's connection to the job's store, joined with every other rank of this attempt.
Result<std::unique_ptr<rendezvous::StoreClient>> JoinJob(const cli::Options& options,
                                                         const training::WorkerIdentity& identity,
                                                         const std::string& prefix) {
  DPL_ASSIGN_OR_RETURN(auto store_options, WorkerStoreClientOptions(options));
  rendezvous::StoreClientOptions client_options = store_options;
  // A worker cut off from machine 0 must fail within --backend-timeout, as a silent peer does.
  client_options.call_timeout = std::min(client_options.call_timeout, options.backend_timeout);
  client_options.keepalive_timeout =
      std::min(client_options.keepalive_timeout, options.backend_timeout);
  DPL_ASSIGN_OR_RETURN(auto client, rendezvous::StoreClient::Connect(client_options));
  Status joined =
      rendezvous::Barrier(*client, prefix, "join", identity.world_size, options.rendezvous_timeout);
  if (!joined.ok()) return joined.WithContext("waiting for all ranks to join");
  return client;
}

// Chooses the backend for --backend and the device, checks it fits the devices, and connects it.
Result<ConnectedBackend> ConnectBackend(const cli::Options& options,
                                        const plugin_host::Discovery& discovery,
                                        const training::WorkerIdentity& identity, int cuda_devices,
                                        rendezvous::StoreClient& store, const std::string& prefix) {
  std::string reason;
  DPL_ASSIGN_OR_RETURN(
      auto plugin,
      plugin_host::ChooseBackend(discovery, options.backend,
                                 training::NameOf(training::DeviceNames(), options.training.device),
                                 &reason));
  if (identity.rank == 0 && !reason.empty()) log::Info(reason);
  DPL_RETURN_IF_ERROR(CheckBackendFitsDevices(plugin.name, identity, cuda_devices));
  const bool cuda = options.training.device == training::Device::kCuda;
  if (cuda && cuda_devices > 0 && identity.local_world_size > cuda_devices &&
      identity.local_rank == 0) {
    log::Info(std::to_string(identity.local_world_size) + " workers of this machine share its " +
              std::to_string(cuda_devices) + " GPU(s): worker k computes on CUDA device k mod " +
              std::to_string(cuda_devices));
  }
  Result<ConnectedBackend> connected = StartBackend(plugin, options, identity, store, prefix);
  if (!connected.ok() || options.selftest_job || !SumsAcrossMachines(options)) return connected;
  DPL_RETURN_IF_ERROR(
      StartBackendAcrossMachines(plugin, options, identity, store, prefix, &*connected));
  return connected;
}

// The link test's setup (--selftest, --preflight) for this worker and its job's backend.
LinkTestSetup LinkTestOf(const cli::Options& options, const training::WorkerIdentity& identity,
                         rendezvous::StoreClient& store, const std::string& prefix,
                         const ConnectedBackend& backend) {
  LinkTestSetup setup;
  setup.store = &store;
  setup.prefix = prefix;
  setup.identity = identity;
  setup.options = &options;
  setup.plugin = backend.plugin;
  setup.backend_device_type = backend.backend->device_type();
  setup.timeout = options.rendezvous_timeout;
  return setup;
}

}  // namespace

training::ModelPlugin ModelPluginOf(const plugin_host::LoadedPlugin& plugin) {
  return {plugin.model, plugin_host::LabelOf(plugin)};
}

int Fail(const Status& status) {
  log::Error(status.message());
  if (training::IsReplicaMismatch(status)) return protocol::kNotRestartableExitCode;
  const bool peer_failure =
      status.code() == DPL_ERR_COMMUNICATION || status.code() == DPL_ERR_TIMEOUT;
  return peer_failure ? kPeerFailureExitCode : 1;
}

// The front of this worker's collectives for its attempt (Note [One front for collectives]).
Result<std::unique_ptr<training::Collectives>> OpenFront(const cli::Options& options,
                                                         const training::WorkerIdentity& identity,
                                                         ConnectedBackend& backend,
                                                         rendezvous::StoreClient& client,
                                                         const std::string& prefix) {
  training::Membership membership;
  membership.rank = identity.rank;
  membership.world_size = identity.world_size;
  membership.backend = backend.backend.get();
  membership.local = LocalGroupOf(options, identity, backend.across_machines.get());
  membership.local_reduce = options.training.local_reduce;
  membership.store = &client;
  membership.store_prefix = prefix;
  membership.timeout = options.backend_timeout;
  return training::OpenCollectives(membership);
}

// The training of one worker once its backend, model plugin, data and observability are ready;
// its exit code.
int Train(const cli::Options& options, const training::WorkerIdentity& identity,
          ConnectedBackend& backend, const plugin_host::LoadedPlugin& model_plugin,
          training::TrainingData data, rendezvous::StoreClient& client, const std::string& prefix,
          WorkerObservability& observed) {
  auto collectives = OpenFront(options, identity, backend, client, prefix);
  if (!collectives.ok()) return Fail(collectives.status());
  bool preempted = false;
  training::PreemptionCheck preemption = training::NeverPreempted;
  if (Preemptible(options)) preemption = MakePreemptionCheck(**collectives, &preempted);
  const training::LocalGroup local = LocalGroupOf(options, identity, backend.across_machines.get());
  std::unique_ptr<StepTimeExchange> step_times;
  if (StepTimeExchange::Wanted(options, identity)) {
    auto started = StepTimeExchange::Start(options, identity, prefix);
    if (!started.ok()) return Fail(started.status());
    step_times = std::move(*started);
  }
  Status trained = training::RunTraining(options.training, identity, ModelPluginOf(model_plugin),
                                         std::move(data), **collectives, local,
                                         std::move(preemption), step_times.get());
  if (trained.ok()) {
    observed.Finish();
    return preempted ? protocol::kPreemptedExitCode : 0;
  }
  // Note [Failing fast]: the error goes out first, and the backend is left to the process's end
  // instead of torn down: a backend's teardown may wait on its peers (gloo's does), which would
  // keep this failure from the launcher for as long as --backend-timeout. The closed sockets
  // tell the peers at once. The front's thread may be in such a backend call too.
  const int exit_code = Fail(trained);
  (void)collectives->release();
  (void)backend.backend.release();
  (void)backend.across_machines.release();
  (void)step_times.release();  // its thread may be in a store call to a machine that is gone
  return exit_code;
}

int RunWorkerSession(const cli::Options& options, Result<training::TrainingData> data,
                     Result<plugin_host::Discovery> discovery) {
  if (options.local_rank < 0 || options.local_rank >= options.num_processes) {
    return Fail(Status::InvalidArgument("--local-rank " + std::to_string(options.local_rank) +
                                        " is out of range [0, " +
                                        std::to_string(options.num_processes) +
                                        "); --worker is started by the launcher, not by hand"));
  }
  const bool cuda = options.training.device == training::Device::kCuda;
  const int cuda_devices = cuda ? VisibleCudaDevices() : 0;
  const training::WorkerIdentity identity = PlaceWorker(options, options.local_rank, cuda_devices);
  log::SetPrefix("[rank " + std::to_string(identity.rank) + "]");
  // `ps` and `top` show which rank a process is; the tests find workers by this name too.
  const std::string process_name = "dpl-rank-" + std::to_string(identity.rank);
  prctl(PR_SET_NAME, process_name.c_str());
  const char* attempt_text = std::getenv(rendezvous::kAttemptEnvironmentVariable);
  const std::string prefix = rendezvous::AttemptPrefix(attempt_text ? std::atoi(attempt_text) : 0);
  auto store = JoinJob(options, identity, prefix);
  if (!store.ok()) return Fail(store.status());

  if (!discovery.ok()) return Fail(discovery.status());
  auto backend = ConnectBackend(options, *discovery, identity, cuda_devices, **store, prefix);
  if (!backend.ok()) return Fail(backend.status());
  const LinkTestSetup links = LinkTestOf(options, identity, **store, prefix, *backend);
  if (options.selftest_job) {
    const Status checked = RunSelftest(links, *backend->backend);
    return checked.ok() ? 0 : Fail(checked);
  }
  auto model_plugin =
      plugin_host::FindPlugin(*discovery, DPL_PLUGIN_KIND_MODEL, options.training.model);
  if (!model_plugin.ok()) return Fail(model_plugin.status());
  if (!data.ok()) return Fail(data.status());
  rendezvous::StoreClient& client = **store;
  auto observed = WorkerObservability::Start(options, identity, client, prefix);
  if (!observed.ok()) return Fail(observed.status());
  if (options.preflight) {
    const Status checked = RunPreflight(links);
    if (!checked.ok()) return Fail(checked);
  }
  return Train(options, identity, *backend, *model_plugin, std::move(*data), client, prefix,
               **observed);
}

}  // namespace dpl::worker
