// Note [Starting workers safely]: workers are started with fork + exec of this same binary in
// worker mode. Everything the child needs (argv, environment, pipe ends) is prepared before
// fork(), and between fork() and execve() the child only makes async-signal-safe calls, so the
// store's threads in the launcher cannot leave the child with a held lock, and OpenMP/libtorch
// thread pools only ever start inside the fresh worker image.
//
// Note [No orphans]: each worker asks for SIGKILL when its parent dies (PR_SET_PDEATHSIG) and
// then checks that the parent did not die before that request took effect. The signal follows
// the thread that forked, so workers are forked from the launcher's main thread only.
//
// Note [Root cause]: when a rank fails, its peers fail too, a moment later: their backend sees
// the closed connection or times out waiting, and so would a store call. Whichever exit the
// launcher happens to see first is no root cause, and a launcher killed with its workers leaves
// no failed worker to name at all. So a worker tells by its exit code (kPeerFailureExitCode)
// whether its failure follows from a peer's, and a launcher whose first failed worker is such a
// consequence looks for the failure it follows from, for up to kHeartbeatSilence: another local
// worker that failed on its own (named at once), a failure another launcher published, or, on a
// job of several machines, a machine whose launcher stopped its heartbeat (heartbeat.hpp). Only
// when none shows up is the first consequence named. A job on one machine stops looking as soon
// as all its workers exited. Failures are published only once named, the first published wins,
// and every launcher takes a published failure as the job's.
#include "supervision/supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "common/log.hpp"
#include "observability/stall_report.hpp"
#include "rendezvous/job_reports.hpp"
#include "supervision/heartbeat.hpp"
#include "supervision/output_check.hpp"
#include "supervision/worker_environment.hpp"
#include "worker/device_policy.hpp"
#include "worker/worker.hpp"

namespace dpl::supervision {
namespace {

using namespace std::chrono_literals;

constexpr size_t kRootCauseLines = 20;
constexpr auto kFailurePollInterval = 200ms;
constexpr auto kExitPollInterval = 1ms;
constexpr auto kAllExitedPollInterval = 20ms;

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void OnStopSignal(int signal_number) {
  g_stop_signal = signal_number;
}

// Waits until the worker loader named the pids of the workers it forked and exited; by then every
// worker is this launcher's child (Note [One load per machine]). DPL_ERR_INVALID_ARGUMENT when the
// loader refused the job instead, with its reason.
Result<std::vector<pid_t>> ReadWorkerPids(pid_t loader, int report_fd, int expected) {
  std::string report;
  for (;;) {
    if (g_stop_signal != 0) {
      kill(loader, SIGKILL);
      waitpid(loader, nullptr, 0);
      return Status::Error("the launcher was stopped by signal " + SignalName(g_stop_signal) +
                           " while its workers were starting");
    }
    pollfd fd{report_fd, POLLIN, 0};
    if (poll(&fd, 1, 100) <= 0) continue;  // a timeout or a signal: look at g_stop_signal again
    char buffer[256];
    const ssize_t count = read(report_fd, buffer, sizeof buffer);
    if (count < 0 && errno == EINTR) continue;
    if (count <= 0) break;
    report.append(buffer, static_cast<size_t>(count));
  }
  if (report.rfind(worker::kJobRefusedReport, 0) == 0) {  // no worker was started
    while (waitpid(loader, nullptr, 0) < 0 && errno == EINTR) {
    }
    return Status::InvalidArgument(report.substr(std::strlen(worker::kJobRefusedReport)));
  }
  std::vector<pid_t> pids;
  std::istringstream list(report);
  for (pid_t pid = 0; list >> pid;) pids.push_back(pid);
  if (expected == 1 && pids == std::vector<pid_t>{loader}) return pids;  // it is the worker
  int status = 0;
  while (waitpid(loader, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || static_cast<int>(pids.size()) != expected) {
    return Status::Error(
        "the process that loads the plugins and the data for this machine's "
        "workers (pid " +
        std::to_string(loader) + ") failed before it started " + std::to_string(expected) +
        " worker(s): " + DescribeExit(status) + "; its own messages, if any, are above");
  }
  return pids;
}

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

int64_t UnixMilliseconds() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Closes every descriptor of `fds` and clears it.
void CloseAll(std::vector<int>* fds) {
  for (int fd : *fds) close(fd);
  fds->clear();
}

}  // namespace

void InstallStopHandlers() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int StopSignal() {
  return g_stop_signal;
}

std::string SignalName(int signal_number) {
  const char* abbrev = sigabbrev_np(signal_number);
  return std::to_string(signal_number) + (abbrev ? std::string(" (SIG") + abbrev + ")" : "");
}

std::string DescribeExit(int wait_status) {
  if (WIFSIGNALED(wait_status)) return "killed by signal " + SignalName(WTERMSIG(wait_status));
  const std::string code = "exit code " + std::to_string(WEXITSTATUS(wait_status));
  return IsPeerFailure(wait_status) ? code + " (it lost a peer or the rendezvous store)" : code;
}

bool IsPeerFailure(int wait_status) {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == worker::kPeerFailureExitCode;
}

Supervisor::Supervisor(const cli::Options& options, rendezvous::StoreClient& client,
                       const rendezvous::JobShape& shape, int attempt)
    : options_(options),
      client_(client),
      shape_(shape),
      attempt_(attempt),
      prefix_(rendezvous::AttemptPrefix(attempt)),
      progress_(options.training.progress && options.command == cli::Command::kTrain) {}

Supervisor::~Supervisor() {
  StopAll();
  // However the attempt ended here, this launcher is alive and knows it: its silence from now on
  // is no sign of a vanished machine, and machine 0 need not wait for it.
  if (heartbeat_) heartbeat_->Finish();
  for (auto& worker : workers_) {
    if (worker.output_fd >= 0) close(worker.output_fd);
  }
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

// Fork + exec of the worker loader (Note [Starting workers safely]): argv and environment are
// ready before fork(), and the child makes async-signal-safe calls only.
Result<pid_t> Supervisor::StartLoader(const std::vector<std::string>& arguments,
                                      const std::vector<std::string>& environment,
                                      const std::vector<int>& output_write_fds,
                                      int report_write_fd) {
  std::vector<std::string> argv_text = arguments, envp_text = environment;
  std::vector<char*> argv, envp;
  for (auto& argument : argv_text) argv.push_back(argument.data());
  argv.push_back(nullptr);
  for (auto& entry : envp_text) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const pid_t launcher_pid = getpid();
  const pid_t loader = fork();
  if (loader < 0) {
    return Status::Error(std::string("cannot start worker processes (fork): ") + strerror(errno));
  }
  if (loader == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher_pid) _exit(127);
    dup2(report_write_fd, STDOUT_FILENO);
    for (int fd : output_write_fds) fcntl(fd, F_SETFD, 0);  // these survive the exec
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    execve("/proc/self/exe", argv.data(), envp.data());
    _exit(127);
  }
  return loader;
}

Status Supervisor::Spawn(const std::string& store_addr) {
  cli::Options worker_options = options_;
  worker_options.threads_per_worker = worker::ThreadsPerWorker(options_);
  worker_options.training.resume = options_.training.resume || attempt_ > 0;
  // Published, so the other machines stop at once instead of waiting for this one's workers.
  Status writable = CheckOutputsWritable(options_, shape_.machine_id);
  auto log_files = writable.ok() ? OpenLogFiles() : Result<LogFiles>(writable);
  if (!log_files.ok()) {
    outputs_unusable_ = true;
    return Failed(log_files.status().message());
  }
  if (shape_.num_machines > 1) {
    heartbeat_ = std::make_unique<Heartbeat>(client_, prefix_, shape_.machine_id);
  }
  // One pipe per worker for its stdout and stderr, and one on which the loader names the pids
  // of the workers it forked (Note [One load per machine]).
  std::vector<int> output_read_fds, output_write_fds, report_fds(2, -1);
  for (int local = 0; local <= shape_.num_processes; ++local) {
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
      const std::string reason = strerror(errno);
      CloseAll(&output_read_fds);
      CloseAll(&output_write_fds);
      return Status::Error("cannot create a pipe for the workers: " + reason);
    }
    const bool report = local == shape_.num_processes;
    (report ? report_fds[0] : output_read_fds.emplace_back()) = pipe_fds[0];
    (report ? report_fds[1] : output_write_fds.emplace_back()) = pipe_fds[1];
  }
  std::vector<std::string> arguments = {"/proc/self/exe"};
  for (auto& argument : cli::WorkerLoaderArguments(worker_options, output_write_fds, store_addr)) {
    arguments.push_back(argument);
  }
  auto loader = StartLoader(
      arguments, WorkerEnvironment(options_, worker_options.threads_per_worker, attempt_),
      output_write_fds, report_fds[1]);
  CloseAll(&output_write_fds);
  close(report_fds[1]);
  auto pids = loader.ok() ? ReadWorkerPids(*loader, report_fds[0], shape_.num_processes)
                          : Result<std::vector<pid_t>>(loader.status());
  close(report_fds[0]);
  if (!pids.ok()) {
    CloseAll(&output_read_fds);
    job_refused_ = pids.status().code() == DPL_ERR_INVALID_ARGUMENT;
    return Failed(pids.status().message());
  }
  for (int local = 0; local < shape_.num_processes; ++local) {
    Worker worker;
    worker.local_rank = local;
    worker.rank = shape_.RankOf(local);
    worker.pid = (*pids)[static_cast<size_t>(local)];
    worker.output_fd = output_read_fds[static_cast<size_t>(local)];
    worker.log_file = std::move((*log_files)[static_cast<size_t>(local)]);
    if (worker.log_file) worker.log_path = LogPath(options_, worker.rank);
    workers_.push_back(std::move(worker));
  }
  return Status::Ok();
}

Status Supervisor::Failed(const std::string& message) {
  StopAll();  // first: an unresponsive store must not keep the workers running
  const std::string full = message + StallAddendum();
  (void)rendezvous::PublishFailure(client_, prefix_, full);
  return Status::Error(full);
}

Status Supervisor::Supervise() {
  auto next_poll = std::chrono::steady_clock::now();
  for (;;) {
    PumpOutput(100);
    ReapExited();
    if (g_stop_signal != 0) return Failed(StoppedBySignal());
    if (!log_failure_.empty()) return Failed(log_failure_);
    if (const Worker* failed = FirstFailed(FailureKind::kOwn)) return Failed(RootCause(*failed));
    if (const Worker* failed = FirstFailed(FailureKind::kAny)) return FailedAfterPeer(*failed);
    if (AllExited()) {
      if (heartbeat_) heartbeat_->Finish();
      return Status::Ok();
    }
    if (std::chrono::steady_clock::now() < next_poll) continue;
    next_poll = std::chrono::steady_clock::now() + kFailurePollInterval;
    if (std::optional<Status> elsewhere = FailureElsewhere()) return *elsewhere;
    PollStalls();
  }
}

// Note [Root cause]: `first` failed because a peer or the store did; find out which.
Status Supervisor::FailedAfterPeer(const Worker& first) {
  const auto start = std::chrono::steady_clock::now();
  Result<std::vector<int64_t>> beats_before = std::vector<int64_t>();
  if (shape_.num_machines > 1) beats_before = ReadHeartbeats(client_, prefix_, shape_);
  if (!beats_before.ok()) return StoreLost(beats_before.status());
  auto next_poll = start;
  while (std::chrono::steady_clock::now() - start < kHeartbeatSilence) {
    PumpOutput(20);
    ReapExited();
    if (g_stop_signal != 0) return Failed(StoppedBySignal());
    if (const Worker* failed = FirstFailed(FailureKind::kOwn)) return Failed(RootCause(*failed));
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
    if (!silent.empty()) return Failed(Vanished(silent, first));
  }
  return Failed(RootCause(first));
}

std::string Supervisor::Vanished(const std::vector<int>& machines, const Worker& first) const {
  const bool one = machines.size() == 1;
  std::string message = one ? "machine " : "machines ";
  for (size_t i = 0; i < machines.size(); ++i) {
    message += (i == 0 ? "" : ", ") + std::to_string(machines[i]);
  }
  return message + " vanished: " + (one ? "its launcher" : "their launchers") +
         " stopped answering (no heartbeat in the rendezvous store for " +
         std::to_string(kHeartbeatSilence.count()) +
         " ms: killed, or the machine or the network to it is down); after " +
         (one ? "it, " : "them, ") + Describe(first, FailureRole::kAfterPeer);
}

std::optional<Status> Supervisor::FailureElsewhere() {
  auto failure = rendezvous::CheckFailure(client_, prefix_);
  if (!failure.ok()) return StoreLost(failure.status());
  if (!failure->has_value()) return std::nullopt;
  StopAll();
  return Status::Error("the job failed elsewhere: " + **failure);
}

Status Supervisor::StoreLost(const Status& error) {
  StopAll();
  return error.WithContext("machine " + std::to_string(shape_.machine_id) +
                           " lost the rendezvous store of machine 0 and stopped its workers");
}

std::string Supervisor::StoppedBySignal() const {
  return "the launcher of machine " + std::to_string(shape_.machine_id) +
         " was stopped by signal " + SignalName(g_stop_signal);
}

const Supervisor::Worker* Supervisor::FirstFailed(FailureKind kind) const {
  for (const auto& worker : workers_) {
    if (!worker.exited || (WIFEXITED(worker.wait_status) && WEXITSTATUS(worker.wait_status) == 0)) {
      continue;
    }
    if (kind == FailureKind::kAny || !IsPeerFailure(worker.wait_status)) return &worker;
  }
  return nullptr;
}

void Supervisor::PollStalls() {
  auto version = rendezvous::StallBoardVersion(client_, prefix_);
  if (!version.ok() || *version == stall_version_) return;  // CheckFailure reports the store
  stall_version_ = *version;
  auto board = rendezvous::ReadStallBoard(client_, prefix_, shape_.world_size());
  if (!board.ok()) return;
  const std::string picture = observability::DescribeStalls(*board, UnixMilliseconds());
  if (!picture.empty()) {
    log::Warning("stalled: " + picture);
  } else if (!stall_picture_.empty()) {
    log::Info("the stalled backend calls completed; training goes on");
  }
  stall_picture_ = picture;
}

std::string Supervisor::StallAddendum() {
  auto board = rendezvous::ReadStallBoard(client_, prefix_, shape_.world_size());
  if (board.ok()) {
    const std::string picture = observability::DescribeStalls(*board, UnixMilliseconds());
    if (!picture.empty()) stall_picture_ = picture;
  }
  return stall_picture_.empty() ? "" : "\n  stalled before it ended: " + stall_picture_;
}

void Supervisor::StopAll() {
  for (auto& worker : workers_) {
    if (!worker.exited) kill(worker.pid, IsStopped(worker.pid) ? SIGKILL : SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + cli::kDefaultStopGracePeriod;
  while (!AllExited() && std::chrono::steady_clock::now() < deadline) {
    PumpOutput(50);
    ReapExited();
  }
  for (auto& worker : workers_) {
    if (!worker.exited) kill(worker.pid, SIGKILL);
  }
  while (!AllExited()) {
    PumpOutput(50);
    ReapExited();
  }
  PumpOutput(0);
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
    int status = 0;
    if (waitpid(worker.pid, &status, WNOHANG) == worker.pid) {
      // Drain what it wrote before it exited, so its last lines are in the root cause.
      while (ReadOutput(worker)) {
      }
      worker.exited = true;
      worker.wait_status = status;
    }
  }
}

void Supervisor::PumpOutput(int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<Worker*> owners;
  for (auto& worker : workers_) {
    if (worker.output_fd >= 0) {
      fds.push_back({worker.output_fd, POLLIN, 0});
      owners.push_back(&worker);
    }
  }
  if (fds.empty()) {
    // Every worker closed its output, so each is exiting: look again soon, not after the full
    // timeout, or the job's end waits up to that long for nothing.
    if (timeout_ms > 0) std::this_thread::sleep_for(kExitPollInterval);
    return;
  }
  if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents != 0) ReadOutput(*owners[i]);
  }
}

bool Supervisor::ReadOutput(Worker& worker) {
  if (worker.output_fd < 0) return false;
  pollfd fd{worker.output_fd, POLLIN, 0};
  if (poll(&fd, 1, 0) <= 0) return false;
  char buffer[4096];
  const ssize_t count = read(worker.output_fd, buffer, sizeof buffer);
  if (count <= 0) {
    if (!worker.partial_line.empty()) Line(worker, worker.partial_line);
    worker.partial_line.clear();
    close(worker.output_fd);
    worker.output_fd = -1;
    return false;
  }
  worker.partial_line.append(buffer, static_cast<size_t>(count));
  size_t end;
  while ((end = worker.partial_line.find('\n')) != std::string::npos) {
    Line(worker, worker.partial_line.substr(0, end));
    worker.partial_line.erase(0, end + 1);
  }
  return true;
}

void Supervisor::Line(Worker& worker, std::string line) {
  if (observability::IsProgressRecord(line)) {  // rank 0's progress: the bar, not the log
    if (worker.rank == 0) {
      if (auto record = observability::DecodeProgress(line)) progress_.Update(*record);
    }
    return;
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
  worker.last_lines.push_back(line);
  if (worker.last_lines.size() > kRootCauseLines) worker.last_lines.pop_front();
  // Rank 0 speaks for the job; other ranks reach the console only with warnings and errors.
  if (worker.rank == 0 || line.find("error:") != std::string::npos ||
      line.find("warning:") != std::string::npos) {
    log::WriteLine(line);  // stamped, above the progress bar
  }
}

std::string Supervisor::RootCause(const Worker& worker) const {
  return Describe(worker, FailureRole::kRootCause);
}

std::string Supervisor::Describe(const Worker& worker, FailureRole role) const {
  const bool root = role == FailureRole::kRootCause;
  std::string message =
      "rank " + std::to_string(worker.rank) + " (machine " + std::to_string(shape_.machine_id) +
      ", local rank " + std::to_string(worker.local_rank) + ", pid " + std::to_string(worker.pid) +
      ") failed" + (root ? " first" : "") + ": " + DescribeExit(worker.wait_status);
  if (worker.last_lines.empty()) return message + "; it wrote no output";
  message +=
      root ? "; the last lines of its log (the root cause):" : "; the last lines of its log:";
  for (const auto& line : worker.last_lines) message += "\n    " + line;
  return message;
}

}  // namespace dpl::supervision
