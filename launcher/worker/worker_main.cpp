// The worker role of `launcher` (`--worker`): with --worker-outputs, the machine's worker loader,
// which loads once and forks the workers; with --local-rank, one worker, which loads on its own.
//
// Note [One load per machine]: loading libtorch is most of a worker's start-up (about 0.6 s of
// CPU: ~290 libraries, their relocations and libtorch's operator registrations), and N workers
// paid it N times on the machine's cores. So the launcher starts one worker loader (`--worker
// --worker-outputs FD,..`, fork + exec as above): it loads the plugins and reads the data sets
// once, then forks the N workers, which inherit both (the data pages are shared until written,
// and they are never written), names their pids on its stdout and exits. (For one worker it
// names itself and becomes the worker: a fork would only add copy-on-write faults.) The launcher is
// a child subreaper (PR_SET_CHILD_SUBREAPER), so the orphaned workers become its children and it
// supervises them as before; each worker asks for its death signal only once adopted. fork()
// copies only the calling thread, so the loader forks only when it has no other thread: the
// data thread has ended, libtorch and the bundled plugins start none at load, and if some
// plugin did, the loader says so and lets each worker exec a fresh image and load on its own.
// The workers never touch OpenMP or libtorch thread pools before the fork; those start in each
// worker.
#include "worker/worker.hpp"

#include <dirent.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <optional>
#include <thread>

#include "common/log.hpp"
#include "plugin_host/plugin_host.hpp"
#include "protocol/loader_report.hpp"
#include "protocol/worker_command.hpp"
#include "training/data.hpp"
#include "worker/device_policy.hpp"
#include "worker/local_memory.hpp"
#include "worker/model_probe.hpp"
#include "worker/preemption_signals.hpp"
#include "worker/worker_session.hpp"

extern char** environ;

namespace dpl::worker {
namespace {

// Takes fd `own` as stdout and stderr and closes the other workers' outputs. Async-signal-safe.
void TakeOutput(const std::vector<int>& output_fds, size_t own) {
  dup2(output_fds[own], STDOUT_FILENO);
  dup2(output_fds[own], STDERR_FILENO);
  for (int fd : output_fds) {
    if (fd != STDOUT_FILENO && fd != STDERR_FILENO) close(fd);
  }
}

// In a freshly forked worker (async-signal-safe calls only: the loader may have more than one
// thread, Note [One load per machine]): waits until the loader exits and the launcher adopts
// this process, and only then asks for SIGKILL at the launcher's death (Note [No orphans] in
// supervision/worker_spawn.cpp):
// asked earlier, the signal would come at the loader's exit. False when the launcher is gone.
bool WaitForAdoption(pid_t loader_pid, pid_t launcher_pid) {
  for (;;) {
    const pid_t parent = getppid();
    if (parent == launcher_pid) break;
    if (parent != loader_pid) return false;  // adopted by another process: the launcher died
    const timespec pause{0, 100 * 1000};
    nanosleep(&pause, nullptr);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  return getppid() == launcher_pid;
}

// Writes `report` on the report pipe to the launcher (the loader's stdout) in one write.
bool ReportToLauncher(const std::string& report) {
  return write(STDOUT_FILENO, report.data(), report.size()) == static_cast<ssize_t>(report.size());
}

// Tells the launcher which processes its workers are, in local-rank order.
bool ReportWorkerPids(const std::vector<pid_t>& pids) {
  return ReportToLauncher(protocol::EncodeWorkerPids(pids));
}

// Runs this process as worker `local` with what the loader loaded; does not return.
[[noreturn]] void RunAsWorker(const cli::Options& options, int local,
                              Result<training::TrainingData> data,
                              Result<plugin_host::Discovery> discovery) {
  log::SetTimeFormat(log::TimeFormat::kNone);  // the launcher stamps its workers' lines
  cli::Options worker_options = options;
  worker_options.local_rank = local;
  worker_options.worker_output_fds.clear();
  ExportRankVariables(worker_options, local);  // a fresh fork: no other thread yet
  const int exit_code = RunWorkerSession(worker_options, std::move(data), std::move(discovery));
  std::fflush(nullptr);
  std::_Exit(exit_code);
}

// The training (and test) data through the --data plugin; none for a selftest.
Result<training::TrainingData> OpenData(const cli::Options& options,
                                        const Result<plugin_host::Discovery>& discovery) {
  if (options.selftest_job) return training::TrainingData{};
  if (!discovery.ok()) return discovery.status();
  DPL_ASSIGN_OR_RETURN(auto plugin, plugin_host::FindPlugin(*discovery, DPL_PLUGIN_KIND_DATASET,
                                                            options.training.data_format));
  const training::DatasetPlugin dataset{plugin.dataset, plugin_host::LabelOf(plugin)};
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return training::OpenTrainingData(dataset, options.training, threads);
}

int CountThreads() {
  int threads = 0;
  if (DIR* tasks = opendir("/proc/self/task")) {
    while (const dirent* entry = readdir(tasks)) {
      if (entry->d_name[0] != '.') ++threads;
    }
    closedir(tasks);
  }
  return threads;
}

// Tells the launcher that the job is refused and why, instead of naming workers.
int RefuseJob(const Status& reason) {
  if (!ReportToLauncher(protocol::EncodeJobRefusal(reason.message()))) {
    return Fail(reason);  // the launcher will at least find the reason in the loader's output
  }
  return 1;
}

// The command lines of workers started fresh from the executable, built before fork(): a child
// of a process with other threads must not allocate.
struct FreshWorkerCommands {
  std::vector<std::vector<std::string>> arguments;  // per local rank
  std::vector<std::vector<char*>> argv;             // into `arguments`, NULL-terminated
};

void BuildFreshWorkerCommands(const cli::Options& options, FreshWorkerCommands* commands) {
  const std::vector<std::string> job_flags = cli::LauncherArguments(options);
  for (int local = 0; local < options.num_processes; ++local) {
    commands->arguments.push_back(protocol::WorkerCommand(job_flags, local, options.store_addr));
  }
  for (auto& arguments : commands->arguments) {
    std::vector<char*> argv;
    for (auto& argument : arguments) argv.push_back(argument.data());
    argv.push_back(nullptr);
    commands->argv.push_back(std::move(argv));
  }
}

// Forks the machine's workers, each running what the loader loaded, or executing `fresh`'s
// command line when given, then names them to the launcher; the loader's exit code.
int ForkWorkers(const cli::Options& options, const FreshWorkerCommands* fresh,
                Result<training::TrainingData>& data, Result<plugin_host::Discovery>& discovery,
                pid_t launcher_pid) {
  const pid_t loader_pid = getpid();
  std::fflush(nullptr);  // nothing buffered may be written twice by the copies
  std::vector<pid_t> pids;
  for (int local = 0; local < options.num_processes; ++local) {
    const pid_t pid = fork();
    if (pid < 0) {
      const std::string reason = strerror(errno);
      for (pid_t started : pids) kill(started, SIGKILL);
      for (pid_t started : pids) waitpid(started, nullptr, 0);
      return Fail(Status::Error("cannot start worker processes (fork): " + reason));
    }
    if (pid == 0) {
      TakeOutput(options.worker_output_fds, static_cast<size_t>(local));
      if (!WaitForAdoption(loader_pid, launcher_pid)) _exit(127);
      if (fresh != nullptr) {
        execve(protocol::kSelfExecutable, fresh->argv[static_cast<size_t>(local)].data(), environ);
        _exit(127);
      }
      RunAsWorker(options, local, std::move(data), std::move(discovery));
    }
    pids.push_back(pid);
  }
  if (!ReportWorkerPids(pids)) {
    for (pid_t started : pids) kill(started, SIGKILL);
    return Fail(Status::Error("cannot tell the launcher the pids of its workers"));
  }
  return 0;
}

// The machine's worker loader (Note [One load per machine]).
int RunWorkerLoader(const cli::Options& options) {
  log::SetPrefix("[launcher " + std::to_string(options.machine_id) + "]");
  // Its lines go to the launcher's console directly (Note [Who stamps a line] in common/log.hpp).
  log::SetTimeFormat(options.log_time);
  const pid_t launcher_pid = getppid();
  Result<plugin_host::Discovery> discovery = plugin_host::DiscoverPlugins(options.plugin_dirs);
  // Opened here once for the machine: the forked workers share the data's pages. Dataset
  // plugins start no thread that outlives a call (dpl/dataset.h), so fork() stays safe.
  Result<training::TrainingData> data = OpenData(options, discovery);
  // A plugin may start a thread while it loads; a forked copy of it would miss that thread and
  // its locks, so the loader forks (the check below, the workers) only when it has no other.
  const bool fork_in_place = CountThreads() == 1;
  // Data that cannot be read, or a model that cannot take it, ends the job here, once, before any
  // worker exists (Note [Refused before the workers start] in model_probe.cpp).
  if (!options.selftest_job) {
    Status usable = data.status();
    if (data.ok() && fork_in_place) usable = ProbeModelForData(options, *discovery, *data);
    if (!usable.ok()) return RefuseJob(usable);
  }
  ShareMemoryWithWorkers(options);  // Note [Shared memory of a machine]
  if (options.num_processes == 1) {
    // The only worker needs no copy: the loader names itself and becomes that worker. Its output
    // replaces the report pipe, which tells the launcher that the report is complete.
    if (!ReportWorkerPids({getpid()})) {
      return Fail(Status::Error("cannot tell the launcher the pid of its worker"));
    }
    TakeOutput(options.worker_output_fds, 0);
    RunAsWorker(options, 0, std::move(data), std::move(discovery));
  }
  // Without a safe fork, this machine's workers are started fresh from the executable instead.
  FreshWorkerCommands fresh;
  if (!fork_in_place) {
    log::Warning("a plugin started a thread while loading; each worker loads the plugins itself");
    BuildFreshWorkerCommands(options, &fresh);
  }
  return ForkWorkers(options, fork_in_place ? nullptr : &fresh, data, discovery, launcher_pid);
}

}  // namespace

int RunWorker(const cli::Options& options) {
  // A write to a socket whose peer died must fail with EPIPE, which a backend turns into an error
  // naming the peer, not kill the worker with SIGPIPE (gloo writes with plain writev; PyTorch
  // gets the same from Python, which ignores SIGPIPE). The SDK promises it to plugins (common.h).
  // The disposition is inherited by the forked workers and kept across exec.
  std::signal(SIGPIPE, SIG_IGN);
  // Before anything else, so that no worker, forked or started fresh, ends on a scheduler's
  // signal before it can act on it (Note [Preemption] in training/preemption.cpp).
  if (Preemptible(options)) InstallPreemptionHandlers();
  if (!options.worker_output_fds.empty()) return RunWorkerLoader(options);
  // A worker started on its own: its start-up work that needs no peer (the plugins, libtorch is
  // most of a second; the data) runs before the join, so it overlaps the other workers'.
  ExportRankVariables(options, options.local_rank);  // before any thread starts
  Result<plugin_host::Discovery> discovery = plugin_host::DiscoverPlugins(options.plugin_dirs);
  Result<training::TrainingData> data = OpenData(options, discovery);
  return RunWorkerSession(options, std::move(data), std::move(discovery));
}

}  // namespace dpl::worker
