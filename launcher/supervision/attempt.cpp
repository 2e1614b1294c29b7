#include "supervision/attempt.hpp"

#include <memory>
#include <thread>

#include "common/log.hpp"
#include "observability/trace_file.hpp"
#include "protocol/worker_output.hpp"
#include "rendezvous/join.hpp"
#include "supervision/failure_naming.hpp"
#include "supervision/heartbeat.hpp"
#include "supervision/stop_signals.hpp"
#include "supervision/supervisor.hpp"

namespace dpl::supervision {
namespace {

using namespace std::chrono_literals;

constexpr auto kFailurePollInterval = 200ms;
// Every rank sends its trace before it exits, so by the time all machines are done the parts are
// there; the wait only covers a rank whose sending failed (it said why).
constexpr auto kTraceCollectionTimeout = 10s;

// Machine 0 keeps the store up until every machine reported its end of this attempt, so a slow
// machine's workers never lose the store in their last steps. A machine whose launcher stopped
// beating meanwhile (stopped, or its machine gone) ends the wait as a lost machine does during
// training, instead of holding the job open for good.
Status WaitForOtherMachines(rendezvous::StoreClient& client, const std::string& prefix,
                            const rendezvous::JobShape& shape) {
  MachineWatch watch(client, prefix, shape);
  for (;;) {
    DPL_ASSIGN_OR_RETURN(auto done, client.Add(prefix + "machines_done", 0));
    if (done >= shape.num_machines) return Status::Ok();
    DPL_ASSIGN_OR_RETURN(const std::vector<int> lost, watch.Lost());
    if (!lost.empty()) {
      return Status::Error(DescribeLostInPlace(lost, kMachineLostSilence) +
                           "; this machine's workers had finished, that machine's did not say so");
    }
    DPL_ASSIGN_OR_RETURN(auto failure, rendezvous::CheckFailure(client, prefix));
    if (failure.has_value()) return Status::Error("the job failed elsewhere: " + *failure);
    if (StopSignal() != 0) {
      return Status::Error("the launcher of machine 0 was stopped by signal " +
                           SignalName(StopSignal()));
    }
    std::this_thread::sleep_for(kFailurePollInterval);
  }
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

cli::Options AttemptOptions(const cli::Options& options, const Joined& joined, int machines,
                            int place, std::vector<int> machine_ids_by_place) {
  cli::Options attempt = options;
  attempt.machine_ids_by_place = std::move(machine_ids_by_place);
  attempt.num_machines = machines;
  attempt.min_machines = machines;
  attempt.machine_id = place;
  attempt.master_port = joined.port;
  return attempt;
}

Regrouping::Regrouping() = default;
Regrouping::~Regrouping() = default;

AttemptEnd RunAttempt(const cli::Options& attempt_options, Joined& joined, int attempt,
                      Regrouping* regrouping) {
  const rendezvous::JobShape shape{attempt_options.num_machines, attempt_options.num_processes,
                                   attempt_options.machine_id};
  const std::string prefix = rendezvous::AttemptPrefix(attempt);
  AttemptEnd end;
  {
    std::unique_ptr<Supervisor> supervisor;
    if (regrouping != nullptr && regrouping->kept) {
      supervisor = std::move(regrouping->kept);
      end.status = supervisor->Continue(attempt_options, shape, attempt);
    } else {
      supervisor = std::make_unique<Supervisor>(attempt_options, *joined.client, shape, attempt);
      if (regrouping != nullptr) supervisor->AllowRegroup(regrouping->max_machines);
      end.status = supervisor->Spawn(joined.store_addr);
    }
    if (end.status.ok()) end.status = supervisor->Supervise();
    end.worth_restarting = supervisor->WorthRestarting();
    end.preempted = supervisor->preempted();
    end.left = supervisor->left();
    end.lost_machines = supervisor->lost_machines();
    if (end.status.ok() && supervisor->regrouping()) {
      end.regrouped = true;
      end.regroup_why = supervisor->regroup_why();
      regrouping->kept = std::move(supervisor);
      return end;
    }
  }
  if (!end.status.ok()) return end;
  Status reported = joined.client->Add(prefix + "machines_done", 1).status();
  if (reported.ok() && shape.machine_id == 0) {
    reported = WaitForOtherMachines(*joined.client, prefix, shape);
  }
  if (!reported.ok()) {
    AttemptEnd failed;
    failed.status = reported;
    return failed;
  }
  const std::string& trace_file = attempt_options.training.trace_file;
  if (shape.machine_id == 0 && !trace_file.empty() && !end.preempted &&
      attempt_options.command == cli::Command::kTrain) {
    WriteTrace(*joined.client, prefix, shape.world_size(), trace_file);
  }
  log::Info("all " + std::to_string(shape.num_processes) + " workers of machine " +
            std::to_string(attempt_options.MachineIdAt(shape.machine_id)) +
            (end.preempted ? " stopped" : " finished"));
  return end;
}

bool MayRestart(const AttemptEnd& end, int restarts_done, int max_restarts) {
  return StopSignal() == 0 && PreemptionSignal() == 0 && restarts_done < max_restarts &&
         end.worth_restarting;
}

// Note [A preemption instead of a restart]: a failure that --max-restarts would restart, when a
// preemption was asked meanwhile (a scheduler takes the machines back while a worker had just
// died), ends the job as a preemption does, exit 75: the restart would have gone on from the
// newest checkpoint, and so does the requeued job with --resume. It failed with exit 1, and a
// requeue that keys on 75 gave up a job it could go on with.
std::optional<int> PreemptedInsteadOfRestart(const AttemptEnd& end, int restarts_done,
                                             int max_restarts) {
  if (PreemptionSignal() == 0 || StopSignal() != 0 || restarts_done >= max_restarts ||
      !end.worth_restarting || end.status.ok()) {
    return std::nullopt;
  }
  log::Warning(end.status.message());
  log::Info("a preemption was asked by signal " + SignalName(PreemptionSignal()) +
            " while the job would restart after that failure: it stops here (exit code " +
            std::to_string(protocol::kPreemptedExitCode) +
            "); the same command with --resume continues from the newest checkpoint");
  return protocol::kPreemptedExitCode;
}

int Fail(const Status& status) {
  log::Error(status.message());
  return 1;
}

int EndPreempted() {
  log::Info("the job stopped for a preemption after writing a checkpoint (exit code " +
            std::to_string(protocol::kPreemptedExitCode) +
            "); the same command with --resume continues from it");
  return protocol::kPreemptedExitCode;
}

}  // namespace dpl::supervision
