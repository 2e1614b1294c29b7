#include "supervision/launcher.hpp"

#include <sys/prctl.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/log.hpp"
#include "observability/trace_file.hpp"
#include "rendezvous/join.hpp"
#include "rendezvous/store.hpp"
#include "supervision/supervisor.hpp"

namespace dpl::supervision {
namespace {

using namespace std::chrono_literals;

constexpr auto kFailurePollInterval = 200ms;
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

}  // namespace

int RunLauncher(const cli::Options& options) {
  log::StartElapsedClock();
  log::SetTimeFormat(options.log_time);
  log::SetPrefix("[launcher " + std::to_string(options.machine_id) + "]");
  const rendezvous::JobShape shape{options.num_machines, options.num_processes, options.machine_id};
  Status valid = rendezvous::ValidateShape(shape);
  if (!valid.ok()) return Fail(valid);

  const std::string& trace_file = options.training.trace_file;
  const bool writes_trace =
      !trace_file.empty() && options.machine_id == 0 && options.command == cli::Command::kTrain;
  if (writes_trace) {
    Status writable = observability::CheckTracePath(trace_file);
    if (!writable.ok()) return Fail(writable);
  }

  std::unique_ptr<rendezvous::StoreServer> server;
  int port = options.master_port;
  if (options.machine_id == 0) {
    rendezvous::StoreServerOptions server_options;
    server_options.port = options.master_port;
    server_options.job_token = options.job_token;
    auto started = rendezvous::StoreServer::Start(server_options);
    if (!started.ok()) return Fail(started.status());
    server = std::move(*started);
    port = server->port();
    log::Info("rendezvous store listening on port " + std::to_string(port) + " for " +
              std::to_string(shape.world_size()) + " ranks (" + std::to_string(shape.num_machines) +
              (shape.num_machines == 1 ? " machine x " : " machines x ") +
              std::to_string(shape.num_processes) + " processes)");
  }
  const std::string store_host = options.machine_id == 0 ? "127.0.0.1" : options.master_addr;
  rendezvous::StoreClientOptions client_options;
  client_options.host = store_host;
  client_options.port = port;
  client_options.job_token = options.job_token;
  client_options.connect_timeout = options.rendezvous_timeout;
  auto client = rendezvous::StoreClient::Connect(client_options);
  if (!client.ok()) return Fail(client.status());
  Status joined = rendezvous::JoinAsLauncher(**client, shape, options.rendezvous_timeout);
  if (!joined.ok()) {
    (void)rendezvous::PublishFailure(
        **client, rendezvous::AttemptPrefix(0),
        "machine " + std::to_string(shape.machine_id) + " could not join: " + joined.message());
    return Fail(joined);
  }
  // Workers of machine 0 reach the store through loopback; the others through --master-addr.
  const std::string store_addr = store_host + ":" + std::to_string(port);

  // Until now no worker exists, so SIGINT/SIGTERM may simply end the launcher; from here on they
  // must stop the workers first.
  InstallStopHandlers();
  // The workers are forked by the loader, which exits: they must become this process's children
  // (Note [One load per machine]).
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return Fail(Status::Error(std::string("cannot adopt the workers (PR_SET_CHILD_SUBREAPER): ") +
                              strerror(errno)));
  }
  for (int attempt = 0;; ++attempt) {
    const std::string prefix = rendezvous::AttemptPrefix(attempt);
    Status result;
    {
      Supervisor supervisor(options, **client, shape, attempt);
      result = supervisor.Spawn(store_addr);
      if (result.ok()) result = supervisor.Supervise();
    }
    if (result.ok()) {
      Status reported = (*client)->Add(prefix + "machines_done", 1).status();
      if (reported.ok() && options.machine_id == 0) {
        reported = WaitForOtherMachines(**client, prefix, shape.num_machines);
      }
      if (!reported.ok()) return Fail(reported);
      if (writes_trace) WriteTrace(**client, prefix, shape.world_size(), trace_file);
      log::Info("all " + std::to_string(shape.num_processes) + " workers of machine " +
                std::to_string(shape.machine_id) + " finished");
      return 0;
    }
    if (StopSignal() != 0 || attempt >= options.max_restarts) {
      return Fail(result.WithContext("job failed"));
    }
    log::Warning(result.message());
    log::Warning("restarting the job (restart " + std::to_string(attempt + 1) + " of " +
                 std::to_string(options.max_restarts) + ") with --resume");
  }
}

}  // namespace dpl::supervision
