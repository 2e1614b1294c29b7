// The supervisor is a loop over one state, "workers running", with four ways out: a stop signal,
// a log that cannot be written, a worker's failure (its own: named at once; a peer failure: Note
// [Root cause] in failure_naming.hpp, FailedAfterPeer), and a failure another machine published
// or a lost store; or every worker exited well. Each turn relays output, reaps exits and, every
// kFailurePollInterval, asks the store.
#include "supervision/supervisor.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/log.hpp"
#include "protocol/worker_output.hpp"
#include "rendezvous/membership.hpp"
#include "rendezvous/regroup.hpp"
#include "supervision/heartbeat.hpp"
#include "supervision/output_check.hpp"
#include "supervision/program_spawn.hpp"
#include "supervision/stop_signals.hpp"
#include "supervision/worker_environment.hpp"
#include "supervision/worker_spawn.hpp"

namespace dpl::supervision {
namespace {

using namespace std::chrono_literals;

constexpr auto kFailurePollInterval = 200ms;
// A program's workers are looked at this often: which rank exited first is the root cause, and no
// exit code of theirs says that a peer failed first (Note [A program's workers]).
constexpr int kProgramPollMs = 10;
constexpr auto kExitPollInterval = 1ms;
// How long a program's worker that raised first may take to exit before a peer that exited
// sooner is named instead (Note [A raising rank is the root cause]).
constexpr auto kTracebackExitGrace = 2s;
constexpr const char* kTracebackStart = "Traceback (most recent call last):";
constexpr auto kAllExitedPollInterval = 20ms;
// How long the workers have to reach a step boundary and write its checkpoint after a preemption
// signal; schedulers kill the job 30 s after theirs (Slurm's KillWait, Kubernetes'
// terminationGracePeriodSeconds), and the launcher still has to report.
constexpr auto kPreemptionDeadline = 25s;

// Whether `pid` is stopped (SIGSTOP, a debugger): state 'T' or 't' in /proc/PID/stat.
bool IsStopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto end_of_name = line.rfind(')');
  return end_of_name != std::string::npos && end_of_name + 2 < line.size() &&
         (line[end_of_name + 2] == 'T' || line[end_of_name + 2] == 't');
}

std::string LogPath(const cli::Options& options, int rank) {
  return options.log_dir + "/rank-" + std::to_string(rank) + ".log";
}

bool Succeeded(int wait_status) {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

// A fixed job's machines may still be coming when its attempt starts; an elastic attempt's are
// its members.
MachineWatch::Joining JoiningOf(const cli::Options& options) {
  return options.attempt_of_elastic_job() ? MachineWatch::Joining::kAllJoined
                                          : MachineWatch::Joining::kByClaimedId;
}

// A worker that stopped for a preemption did what it was asked: no failure.
bool EndedWell(int wait_status) {
  return Succeeded(wait_status) || protocol::IsPreempted(wait_status);
}

}  // namespace

Supervisor::Supervisor(const cli::Options& options, rendezvous::StoreClient& client,
                       const rendezvous::JobShape& shape, int attempt)
    : options_(options),
      program_(options.runs_program()),
      client_(client),
      shape_(shape),
      attempt_(attempt),
      prefix_(rendezvous::AttemptPrefix(attempt)),
      progress_(options.training.progress && options.command == cli::Command::kTrain &&
                !options.runs_program()),
      stalls_(client, prefix_, shape.world_size()) {
  if (shape.num_machines > 1)
    machines_ = std::make_unique<MachineWatch>(client, prefix_, shape, JoiningOf(options));
}

Supervisor::~Supervisor() {
  StopAll();
  // However the attempt ended here, this launcher is alive and knows it: its silence from now on
  // is no sign of a vanished machine, and machine 0 need not wait for it. One that left the job
  // is gone, as a vanished one is, and the others go on without it.
  if (heartbeat_ && !left_) heartbeat_->Finish();
}

Result<Supervisor::LogFiles> Supervisor::OpenLogFiles() const {
  std::vector<std::unique_ptr<std::ofstream>> files(static_cast<size_t>(shape_.num_processes));
  if (options_.log_dir.empty()) return files;
  ::mkdir(options_.log_dir.c_str(), 0755);  // an existing folder is fine
  for (int local = 0; local < shape_.num_processes; ++local) {
    const std::string path = LogPath(options_, shape_.RankOf(local));
    auto file = std::make_unique<std::ofstream>(path, std::ios::app);
    if (!*file) {
      return Status::Io("cannot write the log file " + path + " (--log-dir " + options_.log_dir +
                        "): check that the folder is writable");
    }
    files[static_cast<size_t>(local)] = std::move(file);
  }
  return files;
}

Result<SpawnedWorkers> Supervisor::StartWorkerLoader(const std::string& store_addr) {
  cli::Options worker_options = options_;
  worker_options.threads_per_worker = cli::ThreadsPerWorker(options_);
  worker_options.training.resume = options_.training.resume || attempt_ > 0;
  LoaderLaunch launch;
  launch.job_flags = cli::LauncherArguments(worker_options);
  launch.environment = WorkerEnvironment(options_, worker_options.threads_per_worker, attempt_);
  if (regroup_max_machines_ > 0) {
    launch.environment.push_back(std::string(rendezvous::kRegroupEnvironmentVariable) + "=1");
  }
  launch.store_addr = store_addr;
  launch.workers = shape_.num_processes;
  return SpawnWorkers(launch);
}

Status Supervisor::Spawn(const std::string& store_addr) {
  // Published, so the other machines stop at once instead of waiting for this one's workers.
  Status writable =
      CheckOutputsWritable(options_, shape_.machine_id, options_.training.resume || attempt_ > 0);
  auto log_files = writable.ok() ? OpenLogFiles() : Result<LogFiles>(writable);
  if (!log_files.ok()) {
    outputs_unusable_ = true;
    return Failed(log_files.status().message());
  }
  if (shape_.num_machines > 1) {
    heartbeat_ = std::make_unique<Heartbeat>(client_, prefix_, shape_.machine_id);
  }
  Result<SpawnedWorkers> spawned = program_ ? StartProgram() : StartWorkerLoader(store_addr);
  if (!spawned.ok()) {
    job_refused_ = spawned.status().code() == DPL_ERR_INVALID_ARGUMENT;
    return Failed(spawned.status().message());
  }
  for (int local = 0; local < shape_.num_processes; ++local) {
    const size_t index = static_cast<size_t>(local);
    Worker worker;
    worker.local_rank = local;
    worker.rank = shape_.RankOf(local);
    worker.pid = spawned->pids[index];
    worker.on_console = cli::LogsRank(options_, worker.rank);
    worker.log_file = std::move((*log_files)[index]);
    if (worker.log_file) worker.log_path = LogPath(options_, worker.rank);
    worker.output = relay_.Add(spawned->output_fds[index],
                               [this, index](std::string line) { OnLine(workers_[index], line); });
    if (index < spawned->standard_output_fds.size()) {
      worker.standard_output =
          relay_.Add(spawned->standard_output_fds[index],
                     [this, index](std::string line) { OnLine(workers_[index], line, true); });
    }
    workers_.push_back(std::move(worker));
  }
  return Status::Ok();
}

bool Supervisor::WorthRestarting() const {
  for (const auto& worker : workers_) {
    if (worker.exited && protocol::IsNotRestartable(worker.wait_status)) return false;
  }
  return !outputs_unusable_ && !job_refused_;
}

Status Supervisor::Failed(const std::string& message) {
  StopAll();  // first: an unresponsive store must not keep the workers running
  const std::string full = message + stalls_.Addendum();
  (void)rendezvous::PublishFailure(client_, prefix_, full);
  return Status::Error(full);
}

Status Supervisor::Supervise() {
  auto next_poll = std::chrono::steady_clock::now();
  for (;;) {
    PumpOutput(100);
    ReapExited();
    if (StopSignal() != 0) return Stopped();
    if (PreemptionSignal() != 0) {
      if (std::optional<Status> ended = Preempting()) return *ended;
    }
    if (!log_failure_.empty()) return Failed(log_failure_);
    if (const Worker* failed = FirstFailed(FailureKind::kOwn)) {
      if (std::optional<Status> earlier = ProgramFailureElsewhere()) return *earlier;
      if (program_) {
        AwaitEarlierTraceback(*failed);
        failed = FirstFailed(FailureKind::kOwn);
      }
      return Failed(Describe(*failed, FailureRole::kRootCause));
    }
    if (const Worker* failed = FirstFailed(FailureKind::kAny)) return FailedAfterPeer(*failed);
    if (AllExited()) {
      if (heartbeat_) heartbeat_->Finish();
      for (const auto& worker : workers_) preempted_ |= protocol::IsPreempted(worker.wait_status);
      return Status::Ok();
    }
    if (std::chrono::steady_clock::now() < next_poll) continue;
    next_poll = std::chrono::steady_clock::now() + kFailurePollInterval;
    if (std::optional<Status> elsewhere = FailureElsewhere()) return *elsewhere;
    if (std::optional<Status> lost = LostMachine()) return *lost;
    Result<bool> regroup = RegroupCalled();
    if (!regroup.ok()) return StoreLost(regroup.status());
    if (*regroup) return Status::Ok();
    if (!program_) stalls_.Poll();  // a program's ranks post no stalls
  }
}

Status Supervisor::FailedAfterPeer(const Worker& first) {
  const auto start = std::chrono::steady_clock::now();
  Result<std::vector<int64_t>> beats_before = std::vector<int64_t>();
  if (shape_.num_machines > 1) beats_before = ReadHeartbeats(client_, prefix_, shape_);
  if (!beats_before.ok()) return StoreLost(beats_before.status());
  auto next_poll = start;
  while (std::chrono::steady_clock::now() - start < kHeartbeatSilence) {
    PumpOutput(20);
    ReapExited();
    if (StopSignal() != 0) return Stopped();
    if (const Worker* failed = FirstFailed(FailureKind::kOwn)) {
      return Failed(Describe(*failed, FailureRole::kRootCause));
    }
    if (shape_.num_machines == 1 && AllExited()) break;
    if (AllExited()) std::this_thread::sleep_for(kAllExitedPollInterval);  // nothing to read
    if (std::chrono::steady_clock::now() < next_poll) continue;
    next_poll = std::chrono::steady_clock::now() + kFailurePollInterval;
    if (std::optional<Status> elsewhere = FailureElsewhere()) return *elsewhere;
  }
  if (shape_.num_machines > 1) {
    auto beats_after = ReadHeartbeats(client_, prefix_, shape_);
    if (!beats_after.ok()) return StoreLost(beats_after.status());
    const std::vector<int> silent = SilentMachines(*beats_before, *beats_after, shape_.machine_id);
    if (!silent.empty()) {
      RecordLost(silent);
      return Failed(DescribeVanished(IdsOf(silent), Describe(first, FailureRole::kAfterPeer)));
    }
  }
  return Failed(Describe(first, FailureRole::kRootCause));
}

std::optional<Status> Supervisor::FailureElsewhere() {
  auto failure = rendezvous::CheckFailure(client_, prefix_);
  if (!failure.ok()) return StoreLost(failure.status());
  if (!failure->has_value()) return std::nullopt;
  return FailedElsewhere(**failure);
}

std::optional<Status> Supervisor::Preempting() {
  const auto now = std::chrono::steady_clock::now();
  const std::string asked = "a preemption was asked by signal " + SignalName(PreemptionSignal());
  if (!preemption_deadline_) {
    preemption_deadline_ = now + kPreemptionDeadline;
    log::Info(asked + ": every rank writes the checkpoint of the next step boundary, then stops");
    for (const auto& worker : workers_) {
      if (!worker.exited) kill(worker.pid, SIGUSR1);
    }
    return std::nullopt;
  }
  if (now < *preemption_deadline_) return std::nullopt;
  return Failed(asked + ", but the workers of machine " + std::to_string(MachineId()) +
                " did not reach a step boundary within " +
                std::to_string(
                    std::chrono::duration_cast<std::chrono::seconds>(kPreemptionDeadline).count()) +
                " s; they were stopped, and a resumed run starts from the checkpoint before");
}

std::optional<Status> Supervisor::LostMachine() {
  if (!machines_) return std::nullopt;
  // Note [Shrink in place]: a wrong verdict costs a regroup, not a restart, so the wait is
  // shorter; shorter still once a worker saw a peer's connection fail.
  std::chrono::milliseconds silence = kMachineLostSilence;
  if (regroup_max_machines_ > 0) {
    auto witnessed = client_.Add(rendezvous::PeerFailureKey(prefix_), 0);
    if (!witnessed.ok()) return StoreLost(witnessed.status());
    silence = *witnessed > 0 ? kHeartbeatSilence : kMachineLostSilenceInPlace;
  }
  auto lost = machines_->Lost(silence);
  if (!lost.ok()) return StoreLost(lost.status());
  if (lost->empty()) return std::nullopt;
  RecordLost(*lost);
  const bool never_began = std::any_of(
      lost->begin(), lost->end(), [this](int machine) { return machines_->NeverBegan(machine); });
  if (regroup_max_machines_ > 0 && !never_began) {
    return Regroup(DescribeLostInPlace(IdsOf(*lost), silence));
  }
  // This machine's workers still wait to connect to the lost one's ranks: restarted, not regrouped.
  return Failed(DescribeLost(IdsOf(*lost)) +
                (never_began ? " (it never began this attempt: its launcher left before its "
                               "workers started)"
                             : ""));
}

std::optional<Status> Supervisor::ProgramFailureElsewhere() {
  if (!program_ || shape_.num_machines == 1) return std::nullopt;
  auto failure = rendezvous::CheckFailure(client_, prefix_);
  if (!failure.ok() || !failure->has_value()) return std::nullopt;  // this machine's is the first
  return FailedElsewhere(**failure);
}

Status Supervisor::FailedElsewhere(const std::string& failure) {
  StopAll();
  return Status::Error("the job failed elsewhere: " + failure);
}

Status Supervisor::StoreLost(const Status& error) {
  StopAll();
  return error.WithContext("machine " + std::to_string(MachineId()) +
                           " lost the rendezvous store of machine 0 and stopped its workers");
}

std::string Supervisor::StoppedBySignal() const {
  const int signal_number = StopSignal();
  // A scheduler's signal stops a run that writes no checkpoints at once (Note [Stop and
  // preemption signals]): that nothing was saved is said, and what would have saved it.
  const bool saved_nothing = signal_number != SIGINT && !program_ &&
                             options_.command == cli::Command::kTrain &&
                             options_.training.checkpoint_dir.empty();
  return "the launcher of machine " + std::to_string(MachineId()) + " was stopped by signal " +
         SignalName(signal_number) +
         (saved_nothing ? " (the run writes no checkpoints, so nothing was saved; with "
                          "--checkpoint-dir, SIGTERM and SIGUSR1 checkpoint the step and exit 75)"
                        : "");
}

// Note [A raising rank is the root cause]: a program's worker says nothing of why it failed, so
// the first to fail is the root cause. A Python rank that raises prints its traceback, then tears
// down its process group; the peers see their connections close, raise in turn and may exit
// before it does (one full test run in two here). So a program's worker failed when it began a
// traceback, or when it exited, whichever came first; and when the first worker to exit failed
// after another began a traceback, that one gets kTracebackExitGrace to exit on its own, and is
// then named, exit code and traceback, as torchrun names the earliest error of its workers.
int Supervisor::FailureOrder(const Worker& worker) {
  return worker.traceback_order != 0 ? std::min(worker.traceback_order, worker.exit_order)
                                     : worker.exit_order;
}

const Supervisor::Worker* Supervisor::FirstFailed(FailureKind kind) const {
  const Worker* first = nullptr;
  for (const auto& worker : workers_) {
    if (!worker.exited || EndedWell(worker.wait_status)) continue;
    const bool own = program_ || !protocol::IsPeerFailure(worker.wait_status);
    if (kind == FailureKind::kOwn && !own) continue;
    if (first == nullptr || FailureOrder(worker) < FailureOrder(*first)) first = &worker;
  }
  return first;
}

void Supervisor::AwaitEarlierTraceback(const Worker& first) {
  const int failed_at = FailureOrder(first);
  const auto raised_earlier = [&] {
    for (const auto& worker : workers_) {
      if (!worker.exited && worker.traceback_order != 0 && worker.traceback_order < failed_at) {
        return true;
      }
    }
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + kTracebackExitGrace;
  while (raised_earlier() && std::chrono::steady_clock::now() < deadline) {
    if (StopSignal() != 0) return;
    PumpOutput(10);
    ReapExited();
  }
}

void Supervisor::Signal(const Worker& worker, int signal_number) const {
  if (program_) {
    SignalProgramWorker(worker.pid, signal_number);
  } else {
    kill(worker.pid, signal_number);
  }
}

std::optional<int> Supervisor::ExitOf(const Worker& worker) const {
  if (program_) return PeekExit(worker.pid);
  int status = 0;
  if (waitpid(worker.pid, &status, WNOHANG) == worker.pid) return status;
  return std::nullopt;
}

void Supervisor::StopAll() {
  // A program's ranks get the signal that stopped the launcher (Ctrl-C: SIGINT), as torchrun's do.
  const int stop = program_ && StopSignal() != 0 ? StopSignal() : SIGTERM;
  for (auto& worker : workers_) {
    if (!worker.exited) Signal(worker, IsStopped(worker.pid) ? SIGKILL : stop);
  }
  const auto deadline = std::chrono::steady_clock::now() + cli::kDefaultStopGracePeriod;
  while (!AllExited() && std::chrono::steady_clock::now() < deadline) {
    PumpOutput(50);
    ReapExited();
  }
  for (auto& worker : workers_) {
    if (!worker.exited) Signal(worker, SIGKILL);
  }
  while (!AllExited()) {
    PumpOutput(50);
    ReapExited();
  }
  PumpOutput(0);
  for (auto& worker : workers_) {
    if (program_ && !worker.released) ReleaseProgramWorker(worker.pid);
    worker.released = true;
  }
}

bool Supervisor::AllExited() const {
  for (const auto& worker : workers_) {
    if (!worker.exited) return false;
  }
  return true;
}

void Supervisor::ReapExited() {
  for (auto& worker : workers_) {
    if (worker.exited) continue;
    if (std::optional<int> status = ExitOf(worker)) {
      relay_.Drain(worker.output);  // its last lines belong in the root cause
      if (worker.standard_output) relay_.Drain(*worker.standard_output);
      worker.exited = true;
      worker.wait_status = *status;
      worker.exit_order = ++events_;
    }
  }
}

void Supervisor::PumpOutput(int timeout_ms) {
  if (program_) timeout_ms = std::min(timeout_ms, kProgramPollMs);
  // Every worker closed its output, so each is exiting: look again soon, not after the full
  // timeout, or the job's end waits up to that long for nothing.
  if (!relay_.Pump(std::chrono::milliseconds(timeout_ms)) && timeout_ms > 0) {
    std::this_thread::sleep_for(kExitPollInterval);
  }
}

void Supervisor::OnLine(Worker& worker, std::string line, bool standard_output) {
  dpl_log_level severity = DPL_LOG_INFO;
  if (!program_) {  // a program's lines are its own: no progress records, no severities
    const protocol::WorkerLine read = protocol::ReadWorkerLine(line);
    if (read.kind == protocol::WorkerLine::Kind::kProgress) {  // the bar, not the log
      if (worker.rank == 0 && read.progress) progress_.Update(*read.progress);
      return;
    }
    severity = read.severity;
  }
  const std::string prefix = "[rank " + std::to_string(worker.rank) + "]";
  if (line.rfind(prefix, 0) != 0) line = prefix + " " + line;
  if (worker.log_file) {
    *worker.log_file << log::TimePrefix() << line << '\n' << std::flush;
    if (!*worker.log_file && log_failure_.empty()) {
      log_failure_ = "cannot write the log file " + worker.log_path + " (--log-dir " +
                     options_.log_dir + "): " + std::strerror(errno) +
                     "; free space there or pass another --log-dir";
    }
  }
  // By default rank 0 speaks for the built-in loop; its other ranks reach the console only with
  // warnings and errors. A program's ranks all do (--log-ranks).
  // A program's standard output stays the launcher's, as under torchrun (`> results.txt`).
  if (standard_output && worker.on_console) {
    log::WriteOutputLine(line);
  } else if (worker.on_console || severity >= DPL_LOG_WARNING) {
    log::WriteLine(line);  // stamped, above the progress bar
  }
  if (program_ && worker.traceback_order == 0 && line.find(kTracebackStart) != std::string::npos) {
    worker.traceback_order = ++events_;
  }
  worker.tail.Add(std::move(line));
}

std::string Supervisor::Describe(const Worker& worker, FailureRole role) const {
  EndedWorker ended;
  ended.rank = worker.rank;
  ended.machine = shape_.machine_id;
  ended.local_rank = worker.local_rank;
  ended.pid = worker.pid;
  ended.wait_status = worker.wait_status;
  const std::deque<std::string> lines = worker.tail.Lines();
  ended.last_lines = &lines;
  ended.codes = program_ ? ExitCodes::kProgram : ExitCodes::kWorkerProtocol;
  return DescribeFailure(ended, role);
}

}  // namespace dpl::supervision
