// One attempt of the job on this machine: start the machine's workers (through the worker loader,
// Note [One load per machine] in launcher/worker/worker_main.cpp), relay their output, and stop
// all of them when one fails, when another machine reports a failure, or on SIGINT/SIGTERM.
#pragma once

#include <sys/types.h>

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

namespace dpl::supervision {

// SIGINT and SIGTERM from now on only record the signal, for the supervisor to act on.
void InstallStopHandlers();
// The stop signal received, or 0.
int StopSignal();
// "15 (SIGTERM)".
std::string SignalName(int signal_number);
// "exit code 1" or "killed by signal 9 (SIGKILL)" for a waitpid status.
std::string DescribeExit(int wait_status);
// Whether a worker's waitpid status says its failure follows from a peer's or the store's
// (worker::kPeerFailureExitCode; Note [Root cause] in supervisor.cpp).
bool IsPeerFailure(int wait_status);

class Heartbeat;

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
  // fails every attempt the same way.
  bool WorthRestarting() const { return !outputs_unusable_ && !job_refused_; }
  // SIGTERM to every running worker, SIGKILL to those still alive after the grace period (at
  // once to a stopped one, which could not act on SIGTERM).
  void StopAll();

 private:
  // One running worker: its pid, the read end of its merged stdout/stderr, its log.
  struct Worker {
    int rank = 0;
    int local_rank = 0;
    pid_t pid = -1;
    int output_fd = -1;
    std::string partial_line;
    std::deque<std::string> last_lines;
    std::unique_ptr<std::ofstream> log_file;
    std::string log_path;
    bool exited = false;
    int wait_status = 0;
  };

  using LogFiles = std::vector<std::unique_ptr<std::ofstream>>;  // one per local worker or none
  Result<LogFiles> OpenLogFiles() const;
  Result<pid_t> StartLoader(const std::vector<std::string>& arguments,
                            const std::vector<std::string>& environment,
                            const std::vector<int>& output_write_fds, int report_write_fd);
  // Stops the workers, then records `message` as the job's failure for the other machines.
  Status Failed(const std::string& message);
  // Names the failure that `first`, a peer failure, follows from and fails with it.
  Status FailedAfterPeer(const Worker& first);
  // The job's failure as another launcher published it (this machine's workers stopped), or a
  // lost store; nullopt while there is neither.
  std::optional<Status> FailureElsewhere();
  // Stops the workers after a store call failed with `error`.
  Status StoreLost(const Status& error);
  std::string StoppedBySignal() const;
  enum class FailureKind { kOwn, kAny };  // kOwn: not a peer failure
  const Worker* FirstFailed(FailureKind kind) const;
  bool AllExited() const;
  void ReapExited();
  void PumpOutput(int timeout_ms);
  bool ReadOutput(Worker& worker);
  void Line(Worker& worker, std::string line);
  std::string RootCause(const Worker& worker) const;
  enum class FailureRole { kRootCause, kAfterPeer };
  std::string Describe(const Worker& worker, FailureRole role) const;
  // The failure of `machines`, whose launchers stopped their heartbeat, followed by `first`'s.
  std::string Vanished(const std::vector<int>& machines, const Worker& first) const;
  // Note [Stall reports]: prints the ranks' posts when they changed.
  void PollStalls();
  // The stall picture for the job's error: "" or a line to append.
  std::string StallAddendum();

  const cli::Options& options_;
  rendezvous::StoreClient& client_;
  rendezvous::JobShape shape_;
  int attempt_;
  std::string prefix_;
  std::vector<Worker> workers_;
  bool outputs_unusable_ = false;
  bool job_refused_ = false;  // by the worker loader, before any worker started
  std::string log_failure_;   // the first log file that could not be written, and why
  // Declared last: destroyed after ~Supervisor stopped the workers, so it beats until then.
  std::unique_ptr<Heartbeat> heartbeat_;
  observability::ProgressBar progress_;  // fed by rank 0's progress records
  int64_t stall_version_ = 0;
  std::string stall_picture_;  // the last stall summary printed, "" when none stands
};

}  // namespace dpl::supervision
