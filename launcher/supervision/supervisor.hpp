// One attempt of the job on this machine: start the machine's workers (worker_spawn.hpp, or a
// program's: program_spawn.hpp), relay their output (line_relay.hpp), and stop all of them when
// one fails, when another machine reports a failure, or on SIGINT/SIGTERM (stop_signals.hpp),
// naming the failure's root cause (failure_naming.hpp).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/options.hpp"
#include "common/status.hpp"
#include "observability/progress.hpp"
#include "rendezvous/join.hpp"
#include "rendezvous/store.hpp"
#include "supervision/failure_naming.hpp"
#include "supervision/line_relay.hpp"
#include "supervision/output_tail.hpp"
#include "supervision/stall_watch.hpp"
#include "supervision/worker_spawn.hpp"

namespace dpl::supervision {

class Heartbeat;
class MachineWatch;

class Supervisor {
 public:
  Supervisor(const cli::Options& options, rendezvous::StoreClient& client,
             const rendezvous::JobShape& shape, int attempt);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts this machine's workers, which reach the store at `store_addr` (host:port).
  Status Spawn(const std::string& store_addr);
  // Runs until every local worker exited. Ok when the job succeeded on this machine.
  Status Supervise();
  // False after a failure that a restart cannot cure: an output (log, checkpoint folder,
  // --dump-parameters, ...) that cannot be written, or data or a model the worker loader refused,
  // fails every attempt the same way, and so does a worker that says so by its exit code
  // (protocol::kNotRestartableExitCode: replicas that differ).
  bool WorthRestarting() const;
  // After Supervise returned Ok: whether the workers stopped for a preemption (Note [Preemption]
  // in training/preemption.cpp) rather than at the end of the training.
  bool preempted() const { return preempted_; }
  // Whether a stop signal took this machine out of its elastic job (Note [Leaving an elastic
  // job] in supervisor_regroup.cpp): no failure was published, and the job goes on without it.
  bool left() const { return left_; }
  // The places of the machines this attempt lost (their launchers vanished), as far as this
  // launcher found them (Note [Lost machines] in heartbeat.hpp).
  const std::vector<int>& lost_machines() const { return lost_machines_; }
  // Note [Shrink in place] (training/live_state.hpp): in an elastic job whose workers regroup in
  // place (up to `max_machines` machines; call before Spawn), an attempt that lost a machine, or
  // (on the machine at place 0) that a machine waits to join, ends with its workers running:
  // Supervise returns Ok and regrouping() says why. The caller agrees on the next attempt's
  // machines with the other launchers, then calls Continue, or destroys this (which stops them).
  void AllowRegroup(int max_machines);
  bool regrouping() const { return !regroup_why_.empty(); }
  const std::string& regroup_why() const { return regroup_why_; }
  // The running workers go on in `attempt` (`options` and `shape` are its), each told so in the
  // store, and are supervised as that attempt's.
  Status Continue(const cli::Options& options, const rendezvous::JobShape& shape, int attempt);
  // SIGTERM to every running worker, SIGKILL to those still alive after the grace period (at
  // once to a stopped one, which could not act on SIGTERM).
  void StopAll();

 private:
  // One running worker: its pid, its output (a source of relay_), its log.
  struct Worker {
    int rank = 0;
    int local_rank = 0;
    pid_t pid = -1;
    OutputTail tail;
    std::unique_ptr<std::ofstream> log_file;
    std::string log_path;
    size_t output = 0;
    std::optional<size_t> standard_output;  // a program's, relayed to the launcher's
    bool on_console = false;                // every line to the console (--log-ranks)
    bool exited = false;
    // When it exited, and when a program's worker began a Python traceback: places in one
    // sequence of this attempt's events (0: not yet), Note [A raising rank is the root cause].
    int exit_order = 0;
    int traceback_order = 0;
    int wait_status = 0;
    bool released = false;  // a program's: reaped with its process group
  };

  using LogFiles = std::vector<std::unique_ptr<std::ofstream>>;  // one per local worker or none
  Result<LogFiles> OpenLogFiles() const;
  // The workers of the built-in loop, through the worker loader.
  Result<SpawnedWorkers> StartWorkerLoader(const std::string& store_addr);
  // A program's workers (supervisor_program.cpp): where rank 0 serves, then PROGRAM once per rank.
  Result<SpawnedWorkers> StartProgram();
  // Sends `signal_number` to a worker, and to its process group when it is a program's.
  void Signal(const Worker& worker, int signal_number) const;
  // Whether `worker` exited, without reaping a program's (Note [A program's process group]).
  std::optional<int> ExitOf(const Worker& worker) const;
  // Stops the workers, then records `message` as the job's failure for the other machines.
  Status Failed(const std::string& message);
  // Note [Root cause]: names the failure that `first`, a peer failure, follows from, and fails
  // with it.
  Status FailedAfterPeer(const Worker& first);
  // The job's failure as another launcher published it (this machine's workers stopped), or a
  // lost store; nullopt while there is neither.
  std::optional<Status> FailureElsewhere();
  // Before a program's failed rank is named on a job of several machines: a failure another
  // machine published already, which it likely follows from (a program has no exit code that says
  // so, Note [Root cause]); nullopt when there is none, or the store cannot say.
  std::optional<Status> ProgramFailureElsewhere();
  // Stops the workers after `failure`, the one another launcher published, and says so.
  Status FailedElsewhere(const std::string& failure);
  // Stops the workers after a store call failed with `error`.
  Status StoreLost(const Status& error);
  // A preemption signal came: passes it on to the workers (SIGUSR1) the first time, and ends the
  // attempt when they did not stop within kPreemptionDeadline.
  std::optional<Status> Preempting();
  // Ends the attempt when a watched machine stopped beating; nullopt while none did.
  std::optional<Status> LostMachine();
  // Ends the attempt with its workers running, for `why`, and tells the other launchers (Note
  // [Shrink in place]).
  Status Regroup(const std::string& why);
  // Whether another launcher called the attempt's regroup (then regrouping()), or, on the machine
  // at place 0, a machine waits to join and the job has room for it (then it calls it).
  Result<bool> RegroupCalled();
  // The machines at `places` as messages name them: their --machine-id (an elastic attempt's
  // places follow the join order); and this machine so.
  std::vector<int> IdsOf(const std::vector<int>& places) const;
  int MachineId() const { return options_.MachineIdAt(shape_.machine_id); }
  // Records `machines` as lost: in the store for the next attempt, and for the stall picture.
  void RecordLost(const std::vector<int>& machines);
  std::string StoppedBySignal() const;
  // A stop signal's end of the attempt: the job's failure, or in an elastic job this machine's
  // leaving it.
  Status Stopped();
  enum class FailureKind { kOwn, kAny };  // kOwn: not a peer failure
  const Worker* FirstFailed(FailureKind kind) const;
  // An exited worker's place among this attempt's failures: its exit, or the start of its
  // traceback when that came first (a program's worker only has one).
  static int FailureOrder(const Worker& worker);
  // A program's worker that began a traceback before `first` failed, given a moment to exit
  // (Note [A raising rank is the root cause]).
  void AwaitEarlierTraceback(const Worker& first);
  bool AllExited() const;
  void ReapExited();
  void PumpOutput(int timeout_ms);
  // One line a worker wrote; `standard_output` when a program wrote it there.
  void OnLine(Worker& worker, std::string line, bool standard_output = false);
  std::string Describe(const Worker& worker, FailureRole role) const;

  cli::Options options_;  // the attempt's (Continue takes the next one's)
  // A program's workers, not the built-in loop's (Note [A program's workers] in
  // protocol/program_environment.hpp): none of dpl's worker protocol, a process group each.
  const bool program_;
  rendezvous::StoreClient& client_;
  rendezvous::JobShape shape_;
  int attempt_;
  std::string prefix_;
  std::vector<Worker> workers_;
  int events_ = 0;   // exits and tracebacks so far (Worker::exit_order, traceback_order)
  LineRelay relay_;  // the workers' outputs
  bool outputs_unusable_ = false;
  bool job_refused_ = false;             // by the worker loader, before any worker started
  std::string log_failure_;              // the first log file that could not be written, and why
  observability::ProgressBar progress_;  // fed by rank 0's progress records
  StallWatch stalls_;
  std::unique_ptr<MachineWatch> machines_;  // on a job of several machines
  std::vector<int> lost_machines_;
  int regroup_max_machines_ = 0;  // 0: the attempt never regroups
  std::string regroup_why_;
  std::optional<std::chrono::steady_clock::time_point> preemption_deadline_;
  bool preempted_ = false;
  bool left_ = false;
  // Declared last: destroyed after ~Supervisor stopped the workers, so it beats until then.
  std::unique_ptr<Heartbeat> heartbeat_;
};

}  // namespace dpl::supervision
