#include "supervision/launcher.hpp"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <set>
#include <thread>

#include "cli/consistency.hpp"
#include "cluster/machine_ids.hpp"
#include "common/log.hpp"
#include "observability/trace_file.hpp"
#include "rendezvous/join.hpp"
#include "rendezvous/membership.hpp"
#include "rendezvous/store.hpp"
#include "rendezvous/store_location.hpp"
#include "supervision/attempt.hpp"
#include "supervision/elastic_job.hpp"
#include "supervision/folder_lock.hpp"
#include "supervision/heartbeat.hpp"
#include "supervision/hostfile_runner.hpp"
#include "supervision/stop_signals.hpp"

// Note [Machine 0 by address]: with --machine-id auto (the default for several machines), the
// launcher whose --master-addr is an address of its own machine (cluster::IsLocalAddress) serves
// the store and is machine 0; the others join it and take ids in the order they come
// (rendezvous::JoinAsLauncher). Several launchers on the master's machine (tests, one host with
// launchers in turn): the first to bind the port is machine 0, and a launcher that cannot bind
// it but finds a store answering there joins that one instead.

namespace dpl::supervision {
namespace {

using namespace std::chrono_literals;

// How long a launcher that could not bind the master's port looks for a store already there.
constexpr auto kStoreProbeTimeout = 2s;

// --exit-with-stdin: the end of standard input (the ssh connection of --hostfile closed) stops
// the launcher as SIGTERM did before preemptions existed: at once, also in a run that writes
// checkpoints (Note [Stop and preemption signals]).
void StopWhenStdinCloses() {
  std::thread([] {
    char buffer[256];
    for (;;) {
      const ssize_t count = read(STDIN_FILENO, buffer, sizeof buffer);
      if (count == 0 || (count < 0 && errno != EINTR)) break;
    }
    StopAsBy(SIGTERM);
  }).detach();
}

std::string JobSize(const cli::Options& options) {
  const std::string machines = options.elastic() ? std::to_string(options.min_machines) + " to " +
                                                       std::to_string(options.num_machines)
                                                 : std::to_string(options.num_machines);
  return machines + (options.num_machines == 1 ? " machine x " : " machines x ") +
         std::to_string(options.num_processes) + " processes";
}

// Note [A private store]: the built-in store lets in whoever reaches its port and shows the job
// token (none by default), and such a process may join the job, take a machine's place or
// publish a failure that stops it. So a one-machine job's store listens on loopback only, and the
// launcher that serves a store to other machines without a token says so in its first line, and
// how to set one. The listening socket (and every store connection) is close-on-exec and closed
// in any child forked without exec, so no worker holds it (rendezvous/store_server.cpp).
std::string StoreBindAddress(const cli::Options& options) {
  return options.num_machines == 1 ? "127.0.0.1" : "0.0.0.0";
}

// Whether this launcher is to serve the built-in store of a job of several machines without a
// token: it then warns first (Note [A private store]).
void WarnIfTheStoreIsOpen(const cli::Options& options) {
  if (options.num_machines == 1 || !options.job_token.empty() || !options.store.empty()) return;
  bool serves = options.machine_id == 0;
  if (options.machine_id == cli::kAutoMachineId) {
    auto local = cluster::IsLocalAddress(options.master_addr);
    serves = local.ok() && *local;
  }
  if (!serves) return;
  const std::string port = options.master_port == 0
                               ? ""
                               : " (--master-port " + std::to_string(options.master_port) + ")";
  log::Warning("no --job-token: anyone who can reach the store's port" + port +
               " can join this job or stop it; give every launcher the same secret with "
               "--job-token TOKEN or DPL_JOB_TOKEN=TOKEN");
}

// Whether this launcher serves the store (Note [Machine 0 by address]); starts it if so. With
// the store in etcd, machine 0 serves nothing: it is the launcher that publishes the settings.
Result<bool> ServeIfMachineZero(const cli::Options& options, const rendezvous::StoreLocation& store,
                                Joined* joined) {
  bool serve = options.machine_id == 0;
  const bool by_address = options.machine_id == cli::kAutoMachineId;
  if (by_address) {
    auto local = cluster::IsLocalAddress(options.master_addr);
    if (!local.ok()) {
      return local.status().WithContext("--master-addr " + options.master_addr +
                                        " (with --machine-id auto, machine 0 is the machine of "
                                        "that address)");
    }
    serve = *local;
  }
  if (!serve) return false;
  if (!store.builtin()) {
    log::SetPrefix("[launcher 0]");
    log::Info("the job's store is " + store.Describe() + ", for " + JobSize(options));
    return true;
  }
  rendezvous::StoreServerOptions server_options;
  server_options.bind_addr = StoreBindAddress(options);
  server_options.port = options.master_port;
  server_options.job_token = options.job_token;
  auto started = rendezvous::StoreServer::Start(server_options);
  if (!started.ok()) {
    if (!by_address || options.master_port == 0) return started.status();
    rendezvous::StoreClientOptions probe;
    probe.host = "127.0.0.1";
    probe.port = options.master_port;
    probe.job_token = options.job_token;
    probe.connect_timeout = kStoreProbeTimeout;
    auto probed = rendezvous::StoreClient::Connect(probe);
    if (probed.ok()) return false;  // another launcher of this machine serves the job's store
    // A store that answered and refused this launcher (another job token, another job's
    // settings) says what is wrong; the port in use is only its consequence.
    const bool refused = probed.status().code() == DPL_ERR_INVALID_ARGUMENT;
    return refused ? probed.status() : started.status();
  }
  joined->server = std::move(*started);
  joined->port = joined->server->port();
  log::SetPrefix("[launcher 0]");
  log::Info("rendezvous store listening on port " + std::to_string(joined->port) + " for " +
            JobSize(options) +
            (options.num_machines == 1 ? " (on 127.0.0.1 only: no other machine joins)" : ""));
  return true;
}

// Machine 0 publishes the job's settings (with the store in etcd, its keys): refused where the
// store holds another job's keys, unless an elastic job runs on there without its machine 0, which
// this launcher then joins as a new machine (false; Note [A vanished launcher's id] in
// rendezvous/join.cpp).
Result<bool> PublishesSettings(const cli::Options& options, const rendezvous::StoreLocation& store,
                               rendezvous::StoreClient& client) {
  const Status fresh = rendezvous::RefuseEarlierJob(client, store);
  if (fresh.ok()) return true;
  if (!options.elastic()) return fresh;
  DPL_ASSIGN_OR_RETURN(const bool runs_on,
                       rendezvous::JobRunsWithoutMachineZero(client, options.num_machines));
  if (!runs_on) return fresh;
  log::Info("the job in " + store.Describe() +
            " runs on without its machine 0: this launcher joins it as a new machine");
  return false;
}

Result<Joined> StartAndJoin(const cli::Options& options) {
  Joined joined;
  joined.port = options.master_port;
  DPL_ASSIGN_OR_RETURN(auto store, rendezvous::ParseStoreLocation(options.store));
  DPL_ASSIGN_OR_RETURN(auto serving, ServeIfMachineZero(options, store, &joined));
  const std::string store_host = serving ? "127.0.0.1" : options.master_addr;
  joined.client_options.host = store_host;
  joined.client_options.port = joined.port;
  joined.client_options.etcd_endpoints = store.etcd_endpoints;
  joined.client_options.job_token = options.job_token;
  joined.client_options.ended_job_key = rendezvous::kJobEndKey;
  joined.client_options.connect_timeout = options.rendezvous_timeout;
  // Machine 0 out of reach stops this machine within --backend-timeout, as a silent peer does.
  joined.client_options.call_timeout =
      std::min(joined.client_options.call_timeout, options.backend_timeout);
  joined.client_options.keepalive_timeout =
      std::min(joined.client_options.keepalive_timeout, options.backend_timeout);
  DPL_ASSIGN_OR_RETURN(auto client, rendezvous::StoreClient::Connect(joined.client_options));
  joined.client = std::move(client);
  bool replaces_machine_zero = false;
  if (serving) {
    DPL_ASSIGN_OR_RETURN(serving, PublishesSettings(options, store, *joined.client));
    replaces_machine_zero = !serving;
  }
  // Workers of machine 0 reach the store through loopback; the others through --master-addr.
  joined.store_addr = store_host + ":" + std::to_string(joined.port);
  joined.machine_name = cluster::ThisMachineName(options.master_addr);

  rendezvous::LauncherJoin join;
  if (serving) {
    join.machine_id = 0;
  } else if (options.machine_id != cli::kAutoMachineId && !replaces_machine_zero) {
    join.machine_id = options.machine_id;
  }
  join.num_machines = options.num_machines;
  join.elastic = options.elastic();
  join.machine_name = joined.machine_name;
  for (auto& [name, value] : cli::SettingsThatMustMatch(options))
    join.settings.push_back({name, value});
  auto id = rendezvous::JoinAsLauncher(*joined.client, join, options.rendezvous_timeout);
  if (!id.ok()) {
    // A fixed job cannot run without this machine: stop it everywhere. An elastic one goes on,
    // and its coordinator says why this one is not there.
    const std::string who = join.machine_id ? "machine " + std::to_string(*join.machine_id)
                                            : "machine " + joined.machine_name;
    const std::string why = who + " could not join: " + id.status().message();
    (void)rendezvous::RecordRefusal(*joined.client, join.machine_id.value_or(-1), why);
    if (!options.elastic()) {
      (void)rendezvous::PublishFailure(*joined.client, rendezvous::AttemptPrefix(0), why);
    }
    return id.status();
  }
  joined.machine_id = *id;
  return joined;
}

// The workers' join barrier counts ranks ("1 of 2 ranks arrived"); machine 0 names the machines
// whose launchers never reached its store, which is what a user has to start or point at it.
void NameMachinesThatNeverJoined(const cli::Options& options, Joined& joined) {
  for (int id = 1; id < options.num_machines; ++id) {
    if (!rendezvous::MachineName(*joined.client, id).empty()) continue;
    if (rendezvous::WasRefused(*joined.client, id)) continue;  // the failure said why
    log::Error("machine " + std::to_string(id) + " never joined: no launcher of it (--machine-id " +
               std::to_string(id) + " or auto) reached the store at " + options.master_addr + ":" +
               std::to_string(joined.port) + "; start it, or check its --master-addr and " +
               "--master-port");
  }
}

// A fixed set of machines: every attempt runs on all of them.
int RunFixedJob(const cli::Options& options, Joined& joined) {
  const cli::Options attempt_options =
      AttemptOptions(options, joined, options.num_machines, joined.machine_id);
  for (int attempt = 0;; ++attempt) {
    const AttemptEnd end = RunAttempt(attempt_options, joined, attempt);
    const Status& result = end.status;
    if (end.preempted) return EndPreempted();
    if (result.ok()) return 0;
    if (auto code = PreemptedInsteadOfRestart(end, attempt, options.max_restarts)) return *code;
    if (!MayRestart(end, attempt, options.max_restarts)) {
      if (joined.machine_id == 0 && options.num_machines > 1) {
        WaitForOtherMachinesToEnd(*joined.client, rendezvous::AttemptPrefix(attempt),
                                  {attempt_options.num_machines, attempt_options.num_processes,
                                   attempt_options.machine_id},
                                  kFailureDeliveryTimeout);
        NameMachinesThatNeverJoined(options, joined);
      }
      return Fail(result.WithContext("job failed"));
    }
    log::Warning(result.message());
    log::Warning("restarting the job (restart " + std::to_string(attempt + 1) + " of " +
                 std::to_string(options.max_restarts) + ") with --resume");
  }
}

// The log's clock and prefix, and the flags given that change nothing: warned of once, by the
// launcher the user started (the hostfile's launchers get every flag spelt out).
void StartLog(const cli::Options& options) {
  log::StartElapsedClock();
  log::SetTimeFormat(options.log_time);
  const bool known_id = options.machine_id != cli::kAutoMachineId;
  log::SetPrefix(!options.hostfile.empty()
                     ? "[hostfile]"
                     : "[launcher " + (known_id ? std::to_string(options.machine_id) : "?") + "]");
  if (options.no_flag_warnings) return;
  for (const std::string& ignored : cli::FlagsWithoutEffect(options)) log::Warning(ignored);
}

}  // namespace

int RunLauncher(const cli::Options& options) {
  StartLog(options);
  if (!options.hostfile.empty()) return RunHostfile(options);
  const bool known_id = options.machine_id != cli::kAutoMachineId;
  WarnIfTheStoreIsOpen(options);
  if (!options.cluster_environment.empty()) log::Info(options.cluster_environment);
  if (options.exit_with_stdin) StopWhenStdinCloses();
  if (known_id) {
    Status valid = rendezvous::ValidateShape(
        {options.num_machines, options.num_processes, options.machine_id});
    if (!valid.ok()) return Fail(valid);
  }
  auto joined = StartAndJoin(options);
  if (!joined.ok()) return Fail(joined.status());
  log::SetPrefix("[launcher " + std::to_string(joined->machine_id) + "]");
  if (!known_id) {
    log::Info("this is machine " + std::to_string(joined->machine_id) + " (" +
              joined->machine_name + ")" +
              (joined->machine_id == 0 ? ", the machine of --master-addr " + options.master_addr
                                       : ", by the order the machines joined"));
  }

  // Machine 0 writes the trace at the end: a path it cannot write fails now, not after training.
  if (joined->machine_id == 0 && !options.training.trace_file.empty() &&
      options.command == cli::Command::kTrain) {
    Status writable = observability::CheckTracePath(options.training.trace_file);
    if (!writable.ok()) return Fail(writable);
  }

  // Note [One job a checkpoint folder] (folder_lock.hpp): held until this launcher returns.
  FolderLock checkpoint_folder;
  if (joined->machine_id == 0 && options.command == cli::Command::kTrain &&
      !options.runs_program() && !options.training.checkpoint_dir.empty()) {
    auto locked = FolderLock::Take(options.training.checkpoint_dir);
    if (!locked.ok()) return Fail(locked.status());
    checkpoint_folder = std::move(*locked);
  }

  // Until now no worker exists, so SIGINT/SIGTERM may simply end the launcher; from here on they
  // must stop the workers first, or ask them for a checkpoint (Note [Stop and preemption
  // signals]).
  // A program keeps its own checkpoints: SIGTERM reaches its ranks as SIGTERM.
  const bool checkpoints = options.command == cli::Command::kTrain && !options.runs_program() &&
                           !options.training.checkpoint_dir.empty();
  InstallStopHandlers(checkpoints ? OnTermination::kPreempt : OnTermination::kStop);
  // The workers are forked by the loader, which exits: they must become this process's children
  // (Note [One load per machine]).
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return Fail(Status::Error(std::string("cannot adopt the workers (PR_SET_CHILD_SUBREAPER): ") +
                              strerror(errno)));
  }
  return options.elastic() ? RunElasticJob(options, *joined) : RunFixedJob(options, *joined);
}

}  // namespace dpl::supervision
