#include "supervision/launcher.hpp"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <thread>

#include "cluster/machine_ids.hpp"
#include "common/log.hpp"
#include "observability/trace_file.hpp"
#include "rendezvous/join.hpp"
#include "rendezvous/membership.hpp"
#include "rendezvous/store.hpp"
#include "rendezvous/store_location.hpp"
#include "supervision/heartbeat.hpp"
#include "supervision/hostfile_runner.hpp"
#include "supervision/stop_signals.hpp"
#include "supervision/supervisor.hpp"

// Note [Machine 0 by address]: with --machine-id auto (the default for several machines), the
// launcher whose --master-addr is an address of its own machine (cluster::IsLocalAddress) serves
// the store and is machine 0; the others join it and take ids in the order they come
// (rendezvous::JoinAsLauncher). Several launchers on the master's machine (tests, one host with
// launchers in turn): the first to bind the port is machine 0, and a launcher that cannot bind
// it but finds a store answering there joins that one instead.

namespace dpl::supervision {
namespace {

using namespace std::chrono_literals;

constexpr auto kFailurePollInterval = 200ms;
// How long a launcher that could not bind the master's port looks for a store already there.
constexpr auto kStoreProbeTimeout = 2s;
// Every rank sends its trace before it exits, so by the time all machines are done the parts are
// there; the wait only covers a rank whose sending failed (it said why).
constexpr auto kTraceCollectionTimeout = 10s;

// Machine 0 keeps the store up until every machine reported its end of this attempt, so a slow
// machine's workers never lose the store in their last steps.
Status WaitForOtherMachines(rendezvous::StoreClient& client, const std::string& prefix,
                            int num_machines) {
  for (;;) {
    auto done = client.Add(prefix + "machines_done", 0);
    if (!done.ok()) return done.status();
    if (*done >= num_machines) return Status::Ok();
    auto failure = rendezvous::CheckFailure(client, prefix);
    if (!failure.ok()) return failure.status();
    if (failure->has_value()) return Status::Error("the job failed elsewhere: " + **failure);
    if (StopSignal() != 0) {
      return Status::Error("the launcher of machine 0 was stopped by signal " +
                           SignalName(StopSignal()));
    }
    std::this_thread::sleep_for(kFailurePollInterval);
  }
}

int Fail(const Status& status) {
  log::Error(status.message());
  return 1;
}

// Machine 0 writes the --trace file from every rank's part (observability/trace_file.hpp). A
// missing part is a warning: the training itself succeeded.
void WriteTrace(rendezvous::StoreClient& client, const std::string& prefix, int world_size,
                const std::string& path) {
  auto written =
      observability::CollectTrace(client, prefix, world_size, path, kTraceCollectionTimeout);
  if (!written.ok()) {
    log::Warning(written.status().message());
    return;
  }
  log::Info("trace of " + std::to_string(world_size) + " rank(s) written to " + path + " (" +
            log::Bytes(*written) + "; open it in https://ui.perfetto.dev or chrome://tracing)");
}

// --exit-with-stdin: the end of standard input (the ssh connection of --hostfile closed) stops
// the launcher as SIGTERM does.
void StopWhenStdinCloses() {
  std::thread([] {
    char buffer[256];
    for (;;) {
      const ssize_t count = read(STDIN_FILENO, buffer, sizeof buffer);
      if (count == 0 || (count < 0 && errno != EINTR)) break;
    }
    kill(getpid(), SIGTERM);
  }).detach();
}

// The store, its client and who this launcher is in the job.
struct Joined {
  std::unique_ptr<rendezvous::StoreServer> server;  // machine 0's
  rendezvous::StoreClientOptions client_options;
  std::unique_ptr<rendezvous::StoreClient> client;
  int machine_id = 0;
  std::string machine_name;
  std::string store_addr;  // host:port, for the workers
  int port = 0;
};

std::string JobSize(const cli::Options& options) {
  const std::string machines = options.elastic() ? std::to_string(options.min_machines) + " to " +
                                                       std::to_string(options.num_machines)
                                                 : std::to_string(options.num_machines);
  return machines + (options.num_machines == 1 ? " machine x " : " machines x ") +
         std::to_string(options.num_processes) + " processes";
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
    if (!rendezvous::StoreClient::Connect(probe).ok()) return started.status();
    return false;  // another launcher of this machine serves the job's store
  }
  joined->server = std::move(*started);
  joined->port = joined->server->port();
  log::SetPrefix("[launcher 0]");
  log::Info("rendezvous store listening on port " + std::to_string(joined->port) + " for " +
            JobSize(options));
  return true;
}

Result<Joined> StartAndJoin(const cli::Options& options) {
  Joined joined;
  joined.port = options.master_port;
  auto store = rendezvous::ParseStoreLocation(options.store);
  if (!store.ok()) return store.status();
  auto serving = ServeIfMachineZero(options, *store, &joined);
  if (!serving.ok()) return serving.status();
  const std::string store_host = *serving ? "127.0.0.1" : options.master_addr;
  joined.client_options.host = store_host;
  joined.client_options.port = joined.port;
  joined.client_options.etcd_endpoints = store->etcd_endpoints;
  joined.client_options.job_token = options.job_token;
  joined.client_options.connect_timeout = options.rendezvous_timeout;
  // Machine 0 out of reach stops this machine within --backend-timeout, as a silent peer does.
  joined.client_options.call_timeout =
      std::min(joined.client_options.call_timeout, options.backend_timeout);
  joined.client_options.keepalive_timeout =
      std::min(joined.client_options.keepalive_timeout, options.backend_timeout);
  auto client = rendezvous::StoreClient::Connect(joined.client_options);
  if (!client.ok()) return client.status();
  joined.client = std::move(*client);
  if (*serving) DPL_RETURN_IF_ERROR(rendezvous::RefuseEarlierJob(*joined.client, *store));
  // Workers of machine 0 reach the store through loopback; the others through --master-addr.
  joined.store_addr = store_host + ":" + std::to_string(joined.port);
  joined.machine_name = cluster::ThisMachineName(options.master_addr);

  rendezvous::LauncherJoin join;
  if (*serving) {
    join.machine_id = 0;
  } else if (options.machine_id != cli::kAutoMachineId) {
    join.machine_id = options.machine_id;
  }
  join.num_machines = options.num_machines;
  join.elastic = options.elastic();
  join.machine_name = joined.machine_name;
  for (auto& [name, value] : cli::SettingsThatMustMatch(options))
    join.settings.push_back({name, value});
  auto id = rendezvous::JoinAsLauncher(*joined.client, join, options.rendezvous_timeout);
  if (!id.ok()) {
    // A fixed job cannot run without this machine: stop it everywhere. An elastic one goes on.
    if (!options.elastic()) {
      const std::string who = join.machine_id ? "machine " + std::to_string(*join.machine_id)
                                              : "machine " + joined.machine_name;
      (void)rendezvous::PublishFailure(*joined.client, rendezvous::AttemptPrefix(0),
                                       who + " could not join: " + id.status().message());
    }
    return id.status();
  }
  joined.machine_id = *id;
  return joined;
}

// The options of one attempt: its machines, this machine's place among them, the store's port.
cli::Options AttemptOptions(const cli::Options& options, const Joined& joined, int machines,
                            int place) {
  cli::Options attempt = options;
  attempt.num_machines = machines;
  attempt.min_machines = machines;
  attempt.machine_id = place;
  attempt.master_port = joined.port;
  return attempt;
}

// Machine 0's store carries the failure to the other machines: after the job's last attempt
// failed, machine 0 keeps it up until they saw it, for at most this long, so they print the root
// cause instead of "lost the rendezvous store".
constexpr auto kFailureDeliveryTimeout = 3s;

// How one attempt ended on this machine.
struct AttemptEnd {
  Status status;
  bool worth_restarting = true;  // false when a restart would fail the same way
};

// Runs one attempt on this machine; Ok when its workers all succeeded and, on machine 0, every
// other machine reported the same.
AttemptEnd RunAttempt(const cli::Options& attempt_options, Joined& joined, int attempt) {
  const rendezvous::JobShape shape{attempt_options.num_machines, attempt_options.num_processes,
                                   attempt_options.machine_id};
  const std::string prefix = rendezvous::AttemptPrefix(attempt);
  Status result;
  bool worth_restarting = true;
  {
    Supervisor supervisor(attempt_options, *joined.client, shape, attempt);
    result = supervisor.Spawn(joined.store_addr);
    if (result.ok()) result = supervisor.Supervise();
    worth_restarting = supervisor.WorthRestarting();
  }
  if (!result.ok()) return {result, worth_restarting};
  Status reported = joined.client->Add(prefix + "machines_done", 1).status();
  if (reported.ok() && shape.machine_id == 0) {
    reported = WaitForOtherMachines(*joined.client, prefix, shape.num_machines);
  }
  if (!reported.ok()) return {reported};
  const std::string& trace_file = attempt_options.training.trace_file;
  if (shape.machine_id == 0 && !trace_file.empty() &&
      attempt_options.command == cli::Command::kTrain) {
    WriteTrace(*joined.client, prefix, shape.world_size(), trace_file);
  }
  log::Info("all " + std::to_string(shape.num_processes) + " workers of machine " +
            std::to_string(shape.machine_id) + " finished");
  return {Status::Ok()};
}

// A fixed set of machines: every attempt runs on all of them.
int RunFixedJob(const cli::Options& options, Joined& joined) {
  const cli::Options attempt_options =
      AttemptOptions(options, joined, options.num_machines, joined.machine_id);
  for (int attempt = 0;; ++attempt) {
    const AttemptEnd end = RunAttempt(attempt_options, joined, attempt);
    const Status& result = end.status;
    if (result.ok()) return 0;
    if (StopSignal() != 0 || attempt >= options.max_restarts || !end.worth_restarting) {
      if (joined.machine_id == 0 && options.num_machines > 1) {
        WaitForOtherMachinesToEnd(*joined.client, rendezvous::AttemptPrefix(attempt),
                                  {attempt_options.num_machines, attempt_options.num_processes,
                                   attempt_options.machine_id},
                                  kFailureDeliveryTimeout);
      }
      return Fail(result.WithContext("job failed"));
    }
    log::Warning(result.message());
    log::Warning("restarting the job (restart " + std::to_string(attempt + 1) + " of " +
                 std::to_string(options.max_restarts) + ") with --resume");
  }
}

std::string ListMembers(const std::vector<rendezvous::Member>& members) {
  std::string list;
  for (size_t i = 0; i < members.size(); ++i) {
    list += (i ? ", " : "") + std::string("machine ") + std::to_string(members[i].machine_id) +
            " (" + members[i].name + ")";
  }
  return list;
}

// Note [Elastic membership]: every change says who left or came and what it does to the batch.
void LogMembership(const cli::Options& options, int attempt,
                   const std::vector<rendezvous::Member>& before,
                   const std::vector<rendezvous::Member>& now) {
  const int machines = static_cast<int>(now.size());
  const int batch = options.training.batch_size;
  const int per_rank = batch / (machines * options.num_processes);
  if (before.empty()) {
    log::Info("attempt " + std::to_string(attempt) + " runs on " + std::to_string(machines) +
              " machines: " + ListMembers(now) + "; global batch " + std::to_string(batch) + ", " +
              std::to_string(per_rank) + " per rank");
    return;
  }
  const std::string change = rendezvous::DescribeMembershipChange(before, now);
  if (change.empty()) return;
  const int was = static_cast<int>(before.size());
  log::Info("the job continues on " + std::to_string(machines) + " machines (was " +
            std::to_string(was) + ") from the newest checkpoint: " + change +
            "; the global batch stays " + std::to_string(batch) + ", " + std::to_string(per_rank) +
            " per rank (was " + std::to_string(batch / (was * options.num_processes)) + ")");
}

// Machine 0 ends the elastic job for every launcher still waiting for an attempt.
int EndElastic(Joined& joined, const Status& failure) {
  if (joined.machine_id == 0) (void)rendezvous::EndElasticJob(*joined.client, failure.message());
  return failure.ok() ? 0 : Fail(failure);
}

// --num-machines MIN:MAX (Note [Elastic membership] in rendezvous/membership.cpp).
int RunElasticJob(const cli::Options& options, Joined& joined) {
  auto heartbeat = rendezvous::Heartbeat::Start(joined.client_options, joined.machine_id);
  if (!heartbeat.ok()) return Fail(heartbeat.status());
  rendezvous::ElasticOptions elastic;
  elastic.min_machines = options.min_machines;
  elastic.max_machines = options.num_machines;
  elastic.join_grace = options.join_grace;
  elastic.timeout = options.rendezvous_timeout;
  elastic.stop_requested = [] { return StopSignal() != 0; };
  const rendezvous::Member self{joined.machine_id, joined.machine_name};
  std::vector<rendezvous::Member> previous;
  int restarts = 0;
  for (int attempt = 0;; ++attempt) {
    auto joined_attempt = rendezvous::JoinAttempt(*joined.client, attempt, self, previous, elastic);
    if (!joined_attempt.ok()) return EndElastic(joined, joined_attempt.status());
    using Outcome = rendezvous::Attempt::Outcome;
    if (joined_attempt->outcome == Outcome::kJobEnded) {
      if (!joined_attempt->job_end.empty()) return Fail(Status::Error(joined_attempt->job_end));
      log::Info("the job finished without this machine");
      return 0;
    }
    if (joined_attempt->outcome == Outcome::kLeftOut) {
      log::Info("attempt " + std::to_string(attempt) + " runs on " +
                std::to_string(joined_attempt->members.size()) +
                " machines without this one; it joins at the next restart");
      previous = joined_attempt->members;
      continue;
    }
    LogMembership(options, attempt, previous, joined_attempt->members);
    previous = joined_attempt->members;
    const cli::Options attempt_options =
        AttemptOptions(options, joined, static_cast<int>(previous.size()), joined_attempt->index);
    const AttemptEnd end = RunAttempt(attempt_options, joined, attempt);
    const Status& result = end.status;
    if (result.ok()) return EndElastic(joined, Status::Ok());
    if (StopSignal() != 0 || restarts >= options.max_restarts || !end.worth_restarting) {
      return EndElastic(joined, result.WithContext("job failed"));
    }
    ++restarts;
    log::Warning(result.message());
    log::Warning("restarting the job (restart " + std::to_string(restarts) + " of " +
                 std::to_string(options.max_restarts) + ") with the machines that are left");
  }
}

}  // namespace

int RunLauncher(const cli::Options& options) {
  log::StartElapsedClock();
  log::SetTimeFormat(options.log_time);
  if (!options.hostfile.empty()) return RunHostfile(options);
  const bool known_id = options.machine_id != cli::kAutoMachineId;
  log::SetPrefix("[launcher " + (known_id ? std::to_string(options.machine_id) : "?") + "]");
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

  // Until now no worker exists, so SIGINT/SIGTERM may simply end the launcher; from here on they
  // must stop the workers first.
  InstallStopHandlers();
  // The workers are forked by the loader, which exits: they must become this process's children
  // (Note [One load per machine]).
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return Fail(Status::Error(std::string("cannot adopt the workers (PR_SET_CHILD_SUBREAPER): ") +
                              strerror(errno)));
  }
  return options.elastic() ? RunElasticJob(options, *joined) : RunFixedJob(options, *joined);
}

}  // namespace dpl::supervision
