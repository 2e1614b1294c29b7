#include "worker/worker_session.hpp"

#include <sys/prctl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "common/log.hpp"
#include "rendezvous/join.hpp"
#include "rendezvous/regroup.hpp"
#include "rendezvous/store.hpp"
#include "training/live_state.hpp"
#include "training/replica_check.hpp"
#include "training/trainer.hpp"
#include "worker/backend_bootstrap.hpp"
#include "worker/device_policy.hpp"
#include "worker/local_memory.hpp"
#include "worker/preemption_signals.hpp"
#include "worker/regroup_watch.hpp"
#include "worker/selftest.hpp"
#include "worker/step_time_exchange.hpp"
#include "worker/store_client_options.hpp"
#include "worker/worker.hpp"
#include "worker/worker_observability.hpp"

namespace dpl::worker {
namespace {

// Waits until every rank of the attempt whose keys are under `prefix` has joined.
Status MeetTheRanks(rendezvous::StoreClient& client, const cli::Options& options,
                    const training::WorkerIdentity& identity, const std::string& prefix) {
  return rendezvous::Barrier(client, prefix, "join", identity.world_size,
                             options.rendezvous_timeout)
      .WithContext("waiting for all ranks to join");
}

// This worker's connection to the job's store, joined with every other rank of this attempt.
Result<std::unique_ptr<rendezvous::StoreClient>> JoinJob(const cli::Options& options,
                                                         const training::WorkerIdentity& identity,
                                                         const std::string& prefix) {
  // A worker cut off from machine 0 must fail within --backend-timeout, as a silent peer does.
  DPL_ASSIGN_OR_RETURN(auto client, ConnectWorkerStore(options, options.backend_timeout));
  DPL_RETURN_IF_ERROR(MeetTheRanks(*client, options, identity, prefix));
  return client;
}

// `ps` and `top` show which rank a process is, and its log lines say it; the tests find workers
// by this name too.
void NameThisWorker(const training::WorkerIdentity& identity) {
  log::SetPrefix("[rank " + std::to_string(identity.rank) + "]");
  const std::string process_name = "dpl-rank-" + std::to_string(identity.rank);
  prctl(PR_SET_NAME, process_name.c_str());
}

// Whether this worker's launcher regroups in place when a machine is lost or joins.
bool RegroupsInPlace() {
  const char* regroup = std::getenv(rendezvous::kRegroupEnvironmentVariable);
  return regroup != nullptr && std::string(regroup) == "1";
}

// Note [A host path beside a device backend] (training/collectives/collectives.cpp): the backend
// of host memory --backend auto would take on the CPU (gloo, else tcp).
Status StartHostPathFor(const cli::Options& options, const plugin_host::Discovery& discovery,
                        const training::WorkerIdentity& identity, rendezvous::StoreClient& store,
                        const std::string& prefix, ConnectedBackend* connected) {
  std::string reason;
  DPL_ASSIGN_OR_RETURN(auto plugin, plugin_host::ChooseBackend(discovery, "auto", "cpu", &reason));
  DPL_RETURN_IF_ERROR(StartHostPath(plugin, options, identity, store, prefix, connected));
  if (identity.rank == 0) {
    log::Info("backend " + connected->plugin.name + " moves device memory only: " + plugin.name +
              " carries the state a regroup in place hands over, in host memory");
  }
  return Status::Ok();
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
  if (!connected.ok() || options.selftest_job) return connected;
  if (RegroupsInPlace() && NeedsHostPath(*connected->backend)) {
    DPL_RETURN_IF_ERROR(StartHostPathFor(options, discovery, identity, store, prefix, &*connected));
  }
  if (!SumsAcrossMachines(options)) return connected;
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
  membership.host_path = backend.host_path.get();
  membership.local = LocalGroupOf(options, identity, backend.across_machines.get());
  membership.local_reduce = options.training.local_reduce;
  membership.store = &client;
  membership.store_prefix = prefix;
  membership.timeout = options.backend_timeout;
  return training::OpenCollectives(membership);
}

// Why this worker's training cannot keep its state over a change of the job's machines (Note
// [Shrink in place] in training/live_state.hpp); "" where it can: its launcher regroups in place,
// and the backend can end a blocked collective from another thread, and it moves host memory,
// where the state is handed over, or has a host path beside it that does (Note [A host path
// beside a device backend]). The workers of a machine that sum through its shared memory attach
// to it again (Note [A machine's shared memory over a regroup] in
// training/collectives/local_reduce.cpp); their sharded optimizer then keeps each worker's own
// values, not the machine's one copy (ReduceInPlace in training/reducer.cpp).
std::string WhyNotInPlace(const ConnectedBackend& backend) {
  if (!RegroupsInPlace()) return "is restarted by its launcher";
  if (!backend.backend->CanAbort()) return "cannot abort a collective of its backend";
  if (backend.backend->device_type() != kDLCPU && !backend.host_path) {
    return "has no backend of host memory to hand its state over in";
  }
  return "";
}

// Note [Failing fast]: the error goes out first, and the backend is left to the process's end
// instead of torn down: a backend's teardown may wait on its peers (gloo's does), which would
// keep this failure from the launcher for as long as --backend-timeout. The closed sockets tell
// the peers at once. The front's thread may be in such a backend call too.
int FailFast(const Status& failure, std::unique_ptr<training::Collectives> collectives,
             ConnectedBackend& backend, std::unique_ptr<StepTimeExchange> step_times) {
  const int exit_code = Fail(failure);
  (void)collectives.release();
  (void)backend.backend.release();
  (void)backend.across_machines.release();
  (void)backend.host_path.release();
  (void)step_times.release();  // its thread may be in a store call to a machine that is gone
  return exit_code;
}

// One worker's place in the job and what it reaches the others through, for one attempt.
struct AttemptSeat {
  cli::Options options;  // the attempt's: its machines, this machine's place
  training::WorkerIdentity identity;
  std::string prefix;
  ConnectedBackend backend;
};

// Takes the seat `order` names: the identity in the next attempt, the store's join of its ranks
// and a new backend; the old backend is gone first (aborted, its teardown waits on no peer).
Status TakeNewSeat(const rendezvous::RegroupOrder& order, const plugin_host::Discovery& discovery,
                   int cuda_devices, rendezvous::StoreClient& client, AttemptSeat* seat) {
  seat->backend = ConnectedBackend{};
  seat->options.machine_id = order.place;
  seat->options.num_machines = order.machines;
  seat->options.min_machines = order.machines;
  seat->options.training.resume = true;  // with no live state anywhere, the newest checkpoint
  seat->identity = PlaceWorker(seat->options, seat->options.local_rank, cuda_devices);
  seat->prefix = rendezvous::AttemptPrefix(order.attempt);
  NameThisWorker(seat->identity);
  // The threads that read the environment (the model's) are not running now.
  setenv(rendezvous::kAttemptEnvironmentVariable, std::to_string(order.attempt).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(seat->identity.world_size).c_str(), 1);
  ExportRankVariables(seat->options, seat->options.local_rank);
  DPL_RETURN_IF_ERROR(MeetTheRanks(client, seat->options, seat->identity, seat->prefix));
  DPL_ASSIGN_OR_RETURN(seat->backend, ConnectBackend(seat->options, discovery, seat->identity,
                                                     cuda_devices, client, seat->prefix));
  return Status::Ok();
}

// The watch for this worker's regroup order: it aborts `front` when the worker goes on in place
// (`not_in_place` empty), and ends the worker otherwise: its launcher then restarts the job's
// workers. Rank 0 says so beforehand (a worker may fail on a lost peer before any order comes).
Result<std::unique_ptr<RegroupWatch>> WatchForRegroup(const AttemptSeat& seat,
                                                      training::Collectives* front,
                                                      const std::string& not_in_place) {
  if (!not_in_place.empty() && RegroupsInPlace() && seat.identity.rank == 0) {
    log::Info(
        "a machine that leaves or joins restarts the workers from the newest checkpoint: "
        "this worker " +
        not_in_place);
  }
  return RegroupWatch::Start(
      seat.options, seat.prefix, seat.identity.rank,
      [front, not_in_place](const rendezvous::RegroupOrder& order) {
        if (not_in_place.empty()) {
          front->Abort(Status::Communication("the job regroups: " + order.why));
          return;
        }
        log::Warning("the job regroups (" + order.why + "), and this worker " + not_in_place +
                     ": it stops, and the job goes on from the newest checkpoint");
        std::fflush(nullptr);
        std::_Exit(kPeerFailureExitCode);
      });
}

// The training of one worker once its backend, model plugin, data and observability are ready,
// attempt after attempt while its launcher regroups in place; its exit code.
int Train(AttemptSeat seat, const plugin_host::Discovery& discovery, int cuda_devices,
          const plugin_host::LoadedPlugin& model_plugin, training::TrainingData& data,
          rendezvous::StoreClient& client, WorkerObservability& observed) {
  std::optional<training::LiveState> live;
  for (;;) {
    const cli::Options& options = seat.options;
    auto collectives = OpenFront(options, seat.identity, seat.backend, client, seat.prefix);
    if (!collectives.ok()) return Fail(collectives.status());
    const std::string not_in_place = WhyNotInPlace(seat.backend);
    const bool in_place = not_in_place.empty();
    bool preempted = false;
    training::TrainingHooks hooks;
    if (Preemptible(options)) hooks.preemption = MakePreemptionCheck(**collectives, &preempted);
    const training::LocalGroup local =
        LocalGroupOf(options, seat.identity, seat.backend.across_machines.get());
    std::unique_ptr<StepTimeExchange> step_times;
    if (StepTimeExchange::Wanted(options, seat.identity)) {
      auto started = StepTimeExchange::Start(options, seat.identity, seat.prefix);
      if (!started.ok()) return Fail(started.status());
      step_times = std::move(*started);
    }
    hooks.step_times = step_times.get();
    if (in_place) hooks.live_state = &live;
    auto watch = WatchForRegroup(seat, collectives->get(), not_in_place);
    if (!watch.ok()) return Fail(watch.status());
    Status trained =
        training::RunTraining(options.training, seat.identity, ModelPluginOf(model_plugin), data,
                              **collectives, local, std::move(hooks));
    watch->reset();
    if (trained.ok()) {
      observed.Finish();
      return preempted ? protocol::kPreemptedExitCode : 0;
    }
    const bool peer_failure =
        trained.code() == DPL_ERR_COMMUNICATION || trained.code() == DPL_ERR_TIMEOUT;
    if (!in_place || !peer_failure) {
      return FailFast(trained, std::move(*collectives), seat.backend, std::move(step_times));
    }
    (void)client.Add(rendezvous::PeerFailureKey(seat.prefix), 1);  // a witness for the launcher
    auto order = rendezvous::AwaitRegroupOrder(client, seat.prefix, seat.identity.rank,
                                               options.rendezvous_timeout);
    if (!order.ok() || order->stop) {
      return FailFast(trained, std::move(*collectives), seat.backend, std::move(step_times));
    }
    const int rank_before = seat.identity.rank;
    step_times.reset();
    collectives->reset();
    Status seated = TakeNewSeat(*order, discovery, cuda_devices, client, &seat);
    if (seated.ok()) seated = observed.Regroup(seat.identity, seat.prefix);
    if (!seated.ok()) return Fail(seated);
    // Said under the new rank, which the launcher's relay expects (the old one gave the line two).
    log::Info("the job regroups (" + order->why + "): this worker (rank " +
              std::to_string(rank_before) + " before) goes on in attempt " +
              std::to_string(order->attempt) + " on " + std::to_string(order->machines) +
              " machines, after: " + trained.message());
  }
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
  NameThisWorker(identity);
  const std::string prefix = rendezvous::AttemptPrefix(rendezvous::AttemptOfThisWorker());
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
  AttemptSeat seat{options, identity, prefix, std::move(*backend)};
  return Train(std::move(seat), *discovery, cuda_devices, *model_plugin, *data, client, **observed);
}

}  // namespace dpl::worker
