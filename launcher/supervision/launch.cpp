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
#include "supervision/launch.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "common/log.hpp"
#include "plugin_host/plugin_host.hpp"
#include "rendezvous/join.hpp"
#include "rendezvous/store.hpp"
#include "training/trainer.hpp"

extern char** environ;

namespace dpl::supervision {
namespace {

using namespace std::chrono_literals;

constexpr size_t kRootCauseLines = 20;
constexpr auto kFailurePollInterval = 200ms;
constexpr auto kExitPollInterval = 1ms;
constexpr const char* kAttemptEnv = "DPL_ATTEMPT";
constexpr const char* kJobTokenEnv = "DPL_JOB_TOKEN";

// Note [Worker heap]: loading libtorch registers thousands of operators, a flood of small
// allocations, and glibc grows its heap 128 KiB at a time, each fresh 4 KiB page a fault. The
// worker loader starts with glibc's heap grown 64 MiB at a time (MALLOC_TOP_PAD_) and backed by
// transparent huge pages (glibc.malloc.hugetlb=1, which madvises the heap; it takes effect only
// where the kernel allows THP on madvise, as Debian's does). Loading the ConvNet plugin took
// 0.56 s and takes 0.42 s; launcher start to the end of one step, 2 workers: 0.90-1.10 s ->
// 0.76-0.82 s; resident memory after the load 154 -> 156 MiB. The training steps then run on
// that heap as well. glibc reads both only at exec, hence the environment. (The SDK's model
// helper raises the top pad again in create, for hosts other than the launcher.)
constexpr const char* kTopPadEnv = "MALLOC_TOP_PAD_";
constexpr const char* kWorkerTopPad = "67108864";
constexpr const char* kTunablesEnv = "GLIBC_TUNABLES";
constexpr const char* kHugePageHeapTunable = "glibc.malloc.hugetlb";
constexpr const char* kHugePageHeapSetting = "glibc.malloc.hugetlb=1";

// Note [Worker heap] into a worker's environment (NAME=value entries); a setting the user made
// wins: their MALLOC_TOP_PAD_ stays, and the tunable joins their GLIBC_TUNABLES unless it names
// its own glibc.malloc.hugetlb.
void AddWorkerHeapSettings(std::vector<std::string>* environment) {
  const auto named = [&](const std::string& name) {
    return std::find_if(environment->begin(), environment->end(), [&](const std::string& entry) {
      return entry.compare(0, name.size() + 1, name + "=") == 0;
    });
  };
  if (named(kTopPadEnv) == environment->end()) {
    environment->push_back(std::string(kTopPadEnv) + "=" + kWorkerTopPad);
  }
  const auto tunables = named(kTunablesEnv);
  if (tunables == environment->end()) {
    environment->push_back(std::string(kTunablesEnv) + "=" + kHugePageHeapSetting);
  } else if (tunables->find(kHugePageHeapTunable) == std::string::npos) {
    const bool empty = tunables->size() == std::strlen(kTunablesEnv) + 1;
    *tunables += std::string(empty ? "" : ":") + kHugePageHeapSetting;
  }
}

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void OnStopSignal(int signal_number) {
  g_stop_signal = signal_number;
}

std::string SignalName(int signal_number) {
  const char* abbrev = sigabbrev_np(signal_number);
  return std::to_string(signal_number) + (abbrev ? std::string(" (SIG") + abbrev + ")" : "");
}

std::string DescribeExit(int wait_status) {
  if (WIFSIGNALED(wait_status)) return "killed by signal " + SignalName(WTERMSIG(wait_status));
  return "exit code " + std::to_string(WEXITSTATUS(wait_status));
}

int DefaultThreadsPerWorker(int local_workers) {
  const unsigned cores = std::thread::hardware_concurrency();
  return std::max(1, static_cast<int>(cores) / std::max(1, local_workers));
}

// One running worker: its pid, the read end of its merged stdout/stderr, its log.
struct Worker {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  int output_fd = -1;
  std::string partial_line;
  std::deque<std::string> last_lines;
  std::unique_ptr<std::ofstream> log_file;
  bool exited = false;
  int wait_status = 0;
};

// Waits until the worker loader named the pids of the workers it forked and exited; by then every
// worker is this launcher's child (Note [One load per machine]).
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

class Supervisor {
 public:
  Supervisor(const cli::Options& options, rendezvous::StoreClient& client,
             const rendezvous::JobShape& shape, int attempt)
      : options_(options),
        client_(client),
        shape_(shape),
        attempt_(attempt),
        prefix_(rendezvous::AttemptPrefix(attempt)) {}

  ~Supervisor() {
    StopAll();
    for (auto& worker : workers_) {
      if (worker.output_fd >= 0) close(worker.output_fd);
    }
  }

  Status Spawn(const std::string& store_addr) {
    cli::Options worker_options = options_;
    worker_options.threads_per_worker = options_.threads_per_worker > 0
                                            ? options_.threads_per_worker
                                            : DefaultThreadsPerWorker(shape_.num_processes);
    worker_options.resume = options_.resume || attempt_ > 0;
    if (!options_.log_dir.empty()) {
      ::mkdir(options_.log_dir.c_str(), 0755);  // an existing folder is fine
    }
    const std::string threads = std::to_string(worker_options.threads_per_worker);
    std::vector<std::string> environment;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string text = *entry;
      const std::string name = text.substr(0, text.find('='));
      if (name == "OMP_NUM_THREADS" || name == "MKL_NUM_THREADS" ||
          name == "OPENBLAS_NUM_THREADS" || name == kAttemptEnv || name == kJobTokenEnv) {
        continue;
      }
      environment.push_back(text);
    }
    AddWorkerHeapSettings(&environment);
    for (const char* name : {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
      environment.push_back(std::string(name) + "=" + threads);
    }
    environment.push_back(std::string(kAttemptEnv) + "=" + std::to_string(attempt_));
    // Through the environment, not argv, so other users cannot read the token in `ps`.
    if (!options_.job_token.empty()) {
      environment.push_back(std::string(kJobTokenEnv) + "=" + options_.job_token);
    }
    std::vector<char*> envp;
    for (auto& entry : environment) envp.push_back(entry.data());
    envp.push_back(nullptr);

    std::vector<std::unique_ptr<std::ofstream>> log_files(
        static_cast<size_t>(shape_.num_processes));
    if (!options_.log_dir.empty()) {
      for (int local = 0; local < shape_.num_processes; ++local) {
        const std::string path =
            options_.log_dir + "/rank-" + std::to_string(shape_.RankOf(local)) + ".log";
        auto file = std::make_unique<std::ofstream>(path, std::ios::app);
        if (!*file) {
          return Status::Error("cannot write the log file " + path + " (--log-dir " +
                               options_.log_dir + "): check that the folder is writable");
        }
        log_files[static_cast<size_t>(local)] = std::move(file);
      }
    }

    // One pipe per worker for its stdout and stderr, and one on which the loader names the pids
    // of the workers it forked (Note [One load per machine]).
    std::vector<int> output_read_fds;
    std::vector<int> output_write_fds;
    auto close_all = [&] {
      for (int fd : output_read_fds) close(fd);
      for (int fd : output_write_fds) close(fd);
    };
    for (int local = 0; local < shape_.num_processes; ++local) {
      int pipe_fds[2];
      if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
        close_all();
        return Status::Error(std::string("cannot create a pipe for a worker: ") + strerror(errno));
      }
      output_read_fds.push_back(pipe_fds[0]);
      output_write_fds.push_back(pipe_fds[1]);
    }
    int report_fds[2];
    if (pipe2(report_fds, O_CLOEXEC) != 0) {
      close_all();
      return Status::Error(std::string("cannot create a pipe for the workers: ") + strerror(errno));
    }
    std::vector<std::string> arguments = {"/proc/self/exe"};
    for (auto& argument :
         cli::WorkerLoaderArguments(worker_options, output_write_fds, store_addr)) {
      arguments.push_back(argument);
    }
    std::vector<char*> argv;
    for (auto& argument : arguments) argv.push_back(argument.data());
    argv.push_back(nullptr);

    const pid_t launcher_pid = getpid();
    const pid_t loader = fork();
    if (loader < 0) {
      close_all();
      close(report_fds[0]);
      close(report_fds[1]);
      return Status::Error(std::string("cannot start worker processes (fork): ") + strerror(errno));
    }
    if (loader == 0) {
      // Child: async-signal-safe calls only (Note [Starting workers safely]).
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher_pid) _exit(127);
      dup2(report_fds[1], STDOUT_FILENO);
      for (int fd : output_write_fds) fcntl(fd, F_SETFD, 0);  // these survive the exec
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      execve("/proc/self/exe", argv.data(), envp.data());
      _exit(127);
    }
    for (int fd : output_write_fds) close(fd);
    output_write_fds.clear();
    close(report_fds[1]);
    auto pids = ReadWorkerPids(loader, report_fds[0], shape_.num_processes);
    close(report_fds[0]);
    if (!pids.ok()) {
      close_all();
      return pids.status();
    }
    for (int local = 0; local < shape_.num_processes; ++local) {
      Worker worker;
      worker.local_rank = local;
      worker.rank = shape_.RankOf(local);
      worker.pid = (*pids)[static_cast<size_t>(local)];
      worker.output_fd = output_read_fds[static_cast<size_t>(local)];
      worker.log_file = std::move(log_files[static_cast<size_t>(local)]);
      workers_.push_back(std::move(worker));
    }
    return Status::Ok();
  }

  // Runs until every local worker exited. Returns Ok when the job succeeded on this machine.
  Status Supervise() {
    auto next_poll = std::chrono::steady_clock::now();
    for (;;) {
      PumpOutput(100);
      ReapExited();
      if (g_stop_signal != 0) {
        const std::string message = "the launcher of machine " + std::to_string(shape_.machine_id) +
                                    " was stopped by signal " + SignalName(g_stop_signal);
        (void)rendezvous::PublishFailure(client_, prefix_, message);
        StopAll();
        return Status::Error(message);
      }
      for (auto& worker : workers_) {
        if (worker.exited &&
            !(WIFEXITED(worker.wait_status) && WEXITSTATUS(worker.wait_status) == 0)) {
          const std::string message = RootCause(worker);
          (void)rendezvous::PublishFailure(client_, prefix_, message);
          StopAll();
          return Status::Error(message);
        }
      }
      if (AllExited()) return Status::Ok();
      if (std::chrono::steady_clock::now() >= next_poll) {
        next_poll = std::chrono::steady_clock::now() + kFailurePollInterval;
        auto failure = rendezvous::CheckFailure(client_, prefix_);
        if (!failure.ok()) {
          StopAll();
          return failure.status().WithContext("stopping this machine's workers");
        }
        if (failure->has_value()) {
          StopAll();
          return Status::Error("the job failed elsewhere: " + **failure);
        }
      }
    }
  }

  // SIGTERM to every running worker, SIGKILL to those still alive after the grace period.
  void StopAll() {
    for (auto& worker : workers_) {
      if (!worker.exited) kill(worker.pid, SIGTERM);
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

 private:
  bool AllExited() const {
    for (const auto& worker : workers_) {
      if (!worker.exited) return false;
    }
    return true;
  }

  void ReapExited() {
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

  // Waits up to timeout_ms for output of any worker and handles it.
  void PumpOutput(int timeout_ms) {
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

  // Reads one chunk; false at end of output (the pipe is then closed).
  bool ReadOutput(Worker& worker) {
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

  void Line(Worker& worker, std::string line) {
    const std::string prefix = "[rank " + std::to_string(worker.rank) + "]";
    if (line.rfind(prefix, 0) != 0) line = prefix + " " + line;
    if (worker.log_file) *worker.log_file << line << '\n' << std::flush;
    worker.last_lines.push_back(line);
    if (worker.last_lines.size() > kRootCauseLines) worker.last_lines.pop_front();
    // Rank 0 speaks for the job; other ranks reach the console only with warnings and errors.
    if (worker.rank == 0 || line.find("error:") != std::string::npos ||
        line.find("warning:") != std::string::npos) {
      std::fprintf(stderr, "%s\n", line.c_str());
      std::fflush(stderr);
    }
  }

  std::string RootCause(const Worker& worker) const {
    std::string message =
        "rank " + std::to_string(worker.rank) + " (machine " + std::to_string(shape_.machine_id) +
        ", local rank " + std::to_string(worker.local_rank) + ", pid " +
        std::to_string(worker.pid) + ") failed first: " + DescribeExit(worker.wait_status);
    if (worker.last_lines.empty()) return message + "; it wrote no output";
    message += "; the last lines of its log (the root cause):";
    for (const auto& line : worker.last_lines) message += "\n    " + line;
    return message;
  }

  const cli::Options& options_;
  rendezvous::StoreClient& client_;
  rendezvous::JobShape shape_;
  int attempt_;
  std::string prefix_;
  std::vector<Worker> workers_;
};

void InstallStopHandlers() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

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
    if (g_stop_signal != 0) {
      return Status::Error("the launcher of machine 0 was stopped by signal " +
                           SignalName(g_stop_signal));
    }
    std::this_thread::sleep_for(kFailurePollInterval);
  }
}

int Fail(const Status& status) {
  log::Error(status.message());
  return 1;
}

}  // namespace

int RunLauncher(const cli::Options& options) {
  log::SetPrefix("[launcher " + std::to_string(options.machine_id) + "]");
  const rendezvous::JobShape shape{options.num_machines, options.num_processes, options.machine_id};
  Status valid = rendezvous::ValidateShape(shape);
  if (!valid.ok()) return Fail(valid);

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
              " machines x " + std::to_string(shape.num_processes) + " processes)");
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
      log::Info("all " + std::to_string(shape.num_processes) + " workers of machine " +
                std::to_string(shape.machine_id) + " finished");
      return 0;
    }
    if (g_stop_signal != 0 || attempt >= options.max_restarts) {
      return Fail(result.WithContext("job failed"));
    }
    log::Warning(result.message());
    log::Warning("restarting the job (restart " + std::to_string(attempt + 1) + " of " +
                 std::to_string(options.max_restarts) + ") with --resume");
  }
}

namespace {

// A worker once its rank-independent start-up is done (or, for `data`, under way): joins the job,
// creates the backend, then runs the selftest or the training.
int RunLoadedWorker(const cli::Options& options, std::future<Result<training::TrainingData>> data,
                    Result<plugin_host::Discovery> discovery) {
  const rendezvous::JobShape shape{options.num_machines, options.num_processes, options.machine_id};
  training::WorkerIdentity identity;
  identity.local_rank = options.local_rank;
  identity.rank = shape.RankOf(options.local_rank);
  identity.world_size = shape.world_size();
  identity.local_world_size = shape.num_processes;
  identity.threads = options.threads_per_worker > 0 ? options.threads_per_worker
                                                    : DefaultThreadsPerWorker(shape.num_processes);
  log::SetPrefix("[rank " + std::to_string(identity.rank) + "]");
  // `ps` and `top` show which rank a process is; the tests find workers by this name too.
  const std::string process_name = "dpl-rank-" + std::to_string(identity.rank);
  prctl(PR_SET_NAME, process_name.c_str());
  if (options.local_rank < 0 || options.local_rank >= options.num_processes) {
    return Fail(Status::Error("--local-rank " + std::to_string(options.local_rank) +
                              " is out of range [0, " + std::to_string(options.num_processes) +
                              "); --worker is started by the launcher, not by hand"));
  }
  const auto colon = options.store_addr.rfind(':');
  if (colon == std::string::npos) {
    return Fail(Status::Error("--store-addr '" + options.store_addr + "' is not host:port"));
  }
  const char* attempt_text = std::getenv(kAttemptEnv);
  const int attempt = attempt_text ? std::atoi(attempt_text) : 0;
  const std::string prefix = rendezvous::AttemptPrefix(attempt);

  rendezvous::StoreClientOptions client_options;
  client_options.host = options.store_addr.substr(0, colon);
  client_options.port = std::atoi(options.store_addr.c_str() + colon + 1);
  client_options.job_token = options.job_token;
  client_options.connect_timeout = options.rendezvous_timeout;
  auto client = rendezvous::StoreClient::Connect(client_options);
  if (!client.ok()) return Fail(client.status());
  auto& store = **client;
  Status joined =
      rendezvous::Barrier(store, prefix, "join", identity.world_size, options.rendezvous_timeout);
  if (!joined.ok()) return Fail(joined.WithContext("waiting for all ranks to join"));

  if (options.selftest_job) {
    const std::string rank_key = prefix + "selftest/rank/";
    Status status = store.Set(rank_key + std::to_string(identity.rank),
                              rendezvous::ToBytes(std::to_string(identity.rank)));
    if (status.ok()) {
      status = rendezvous::Barrier(store, prefix, "selftest", identity.world_size,
                                   options.rendezvous_timeout);
    }
    std::string ranks;
    std::vector<bool> seen(static_cast<size_t>(identity.world_size), false);
    for (int r = 0; status.ok() && r < identity.world_size; ++r) {
      auto value = store.Get(rank_key + std::to_string(r), options.rendezvous_timeout);
      if (!value.ok()) {
        status = value.status();
        break;
      }
      const int gathered = std::atoi(rendezvous::FromBytes(*value).c_str());
      if (gathered < 0 || gathered >= identity.world_size || seen[static_cast<size_t>(gathered)]) {
        status = Status::Error("selftest: rank " + std::to_string(gathered) +
                               " is out of range or appears twice");
        break;
      }
      seen[static_cast<size_t>(gathered)] = true;
      ranks += (r == 0 ? "" : ",") + std::to_string(gathered);
    }
    // Nobody leaves before everyone has read, so no rank loses the keys it still needs.
    if (status.ok()) {
      status = rendezvous::Barrier(store, prefix, "selftest-done", identity.world_size,
                                   options.rendezvous_timeout);
    }
    if (!status.ok()) return Fail(status.WithContext("selftest"));
    if (identity.rank == 0) {
      log::Info("selftest ok: world size " + std::to_string(identity.world_size) + ", ranks " +
                ranks);
    }
    return 0;
  }

  if (!discovery.ok()) return Fail(discovery.status());
  std::string reason;
  auto backend_plugin =
      plugin_host::ChooseBackend(*discovery, options.backend, options.device, &reason);
  if (!backend_plugin.ok()) return Fail(backend_plugin.status());
  if (identity.rank == 0 && !reason.empty()) log::Info(reason);
  auto model_plugin = plugin_host::FindPlugin(*discovery, DPL_PLUGIN_KIND_MODEL, options.model);
  if (!model_plugin.ok()) return Fail(model_plugin.status());

  rendezvous::PluginStoreView store_view(store, prefix + "backend/" + backend_plugin->name + "/");
  dpl_backend_config_v1 config{};
  config.struct_size = sizeof config;
  config.version = DPL_BACKEND_ABI_VERSION_1;
  config.rank = identity.rank;
  config.world_size = identity.world_size;
  config.local_rank = identity.local_rank;
  config.local_world_size = identity.local_world_size;
  const bool cuda = options.device == "cuda";
  config.device_type = cuda ? kDLCUDA : kDLCPU;
  config.device_id = cuda ? identity.local_rank : 0;
  config.timeout_ms = std::max<int64_t>(1, options.backend_timeout.count());
  config.store = store_view.view();
  config.log = &log::PluginLogCallback;
  config.log_context = nullptr;
  config.options = options.backend_options.c_str();
  dpl_backend* backend = nullptr;
  dpl_status created = backend_plugin->backend->create(&config, &backend);
  if (cuda && created == DPL_ERR_UNSUPPORTED) {
    // A host backend (gloo, tcp) with a GPU model: it sums the host copy of the gradients.
    if (identity.rank == 0) {
      log::Info("backend " + backend_plugin->name +
                " moves host memory only; the GPU model's gradients are summed in host memory");
    }
    config.device_type = kDLCPU;
    config.device_id = 0;
    created = backend_plugin->backend->create(&config, &backend);
  }
  if (created != DPL_OK || backend == nullptr) {
    return Fail(plugin_host::DescribeCallFailure(*backend_plugin, "create",
                                                 created == DPL_OK ? DPL_ERR_INTERNAL : created)
                    .WithContext("backend " + backend_plugin->name + " failed to start"));
  }
  training::TrainingBackend training_backend{backend_plugin->backend, backend, config.device_type};
  auto sum_across_ranks = [&](const std::string& name, std::vector<double>* values) {
    return rendezvous::SumAcrossRanks(store, prefix, name, identity.rank, identity.world_size,
                                      values, options.backend_timeout);
  };
  Status trained = training::RunTraining(options, identity, training_backend, *model_plugin->model,
                                         std::move(data), sum_across_ranks);
  backend_plugin->backend->destroy(backend);
  if (!trained.ok()) return Fail(trained);
  return 0;
}

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
// this process, and only then asks for SIGKILL at the launcher's death (Note [No orphans]):
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

// Tells the launcher which processes its workers are, in local-rank order.
bool ReportWorkerPids(const std::vector<pid_t>& pids) {
  std::string report;
  for (pid_t pid : pids) report += std::to_string(pid) + " ";
  report += "\n";
  return write(STDOUT_FILENO, report.data(), report.size()) == static_cast<ssize_t>(report.size());
}

// Runs this process as worker `local` with what the loader loaded; does not return.
[[noreturn]] void RunAsWorker(const cli::Options& options, int local,
                              std::optional<Result<training::TrainingData>> data,
                              Result<plugin_host::Discovery> discovery) {
  cli::Options worker_options = options;
  worker_options.local_rank = local;
  worker_options.worker_output_fds.clear();
  std::promise<Result<training::TrainingData>> loaded;
  if (data) {
    loaded.set_value(std::move(*data));
  } else {
    loaded.set_value(Status::Error("not needed by a selftest"));
  }
  const int exit_code = RunLoadedWorker(worker_options, loaded.get_future(), std::move(discovery));
  std::fflush(nullptr);
  std::_Exit(exit_code);
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

// The machine's worker loader (Note [One load per machine]).
int RunWorkerLoader(const cli::Options& options) {
  log::SetPrefix("[launcher " + std::to_string(options.machine_id) + "]");
  const pid_t launcher_pid = getppid();
  const pid_t loader_pid = getpid();
  std::optional<Result<training::TrainingData>> data;
  Result<plugin_host::Discovery> discovery = Status::Error("not needed by a selftest");
  if (!options.selftest_job) {
    auto loading = training::StartLoadingData(options);
    discovery = plugin_host::DiscoverPlugins(options.plugin_dirs);
    data = loading.get();  // the loading thread has ended: fork() copies only this one
  }
  if (options.num_processes == 1) {
    // The only worker needs no copy: the loader names itself and becomes that worker. Its output
    // replaces the report pipe, which tells the launcher that the report is complete.
    if (!ReportWorkerPids({getpid()})) {
      return Fail(Status::Error("cannot tell the launcher the pid of its worker"));
    }
    TakeOutput(options.worker_output_fds, 0);
    RunAsWorker(options, 0, std::move(data), std::move(discovery));
  }
  // A plugin may start a thread while it loads; a forked copy of it would miss that thread and
  // its locks, so such a machine's workers are started fresh from the executable instead.
  const bool fork_in_place = CountThreads() == 1;
  std::vector<std::vector<std::string>> worker_arguments;
  std::vector<std::vector<char*>> worker_argv;
  if (!fork_in_place) {
    log::Warning("a plugin started a thread while loading; each worker loads the plugins itself");
    for (int local = 0; local < options.num_processes; ++local) {
      std::vector<std::string> arguments = {"/proc/self/exe"};
      for (auto& argument : cli::WorkerArguments(options, local, options.store_addr)) {
        arguments.push_back(argument);
      }
      worker_arguments.push_back(std::move(arguments));
    }
    for (auto& arguments : worker_arguments) {
      std::vector<char*> argv;
      for (auto& argument : arguments) argv.push_back(argument.data());
      argv.push_back(nullptr);
      worker_argv.push_back(std::move(argv));
    }
  }
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
      if (!fork_in_place) {
        execve("/proc/self/exe", worker_argv[static_cast<size_t>(local)].data(), environ);
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

}  // namespace

int RunWorker(const cli::Options& options) {
  // A write to a socket whose peer died must fail with EPIPE, which a backend turns into an error
  // naming the peer, not kill the worker with SIGPIPE (gloo writes with plain writev; PyTorch
  // gets the same from Python, which ignores SIGPIPE). The SDK promises it to plugins (common.h).
  // The disposition is inherited by the forked workers and kept across exec.
  std::signal(SIGPIPE, SIG_IGN);
  if (!options.worker_output_fds.empty()) return RunWorkerLoader(options);
  // A worker started on its own: start-up work that needs no peer runs before the join, so it
  // overlaps the other workers' start-up instead of adding to it: the data sets load on a thread
  // while the plugins (libtorch is most of a second) load here. Selftest jobs need neither.
  std::future<Result<training::TrainingData>> data;
  Result<plugin_host::Discovery> discovery = Status::Error("not needed by a selftest");
  if (!options.selftest_job) {
    data = training::StartLoadingData(options);
    discovery = plugin_host::DiscoverPlugins(options.plugin_dirs);
  }
  return RunLoadedWorker(options, std::move(data), std::move(discovery));
}

}  // namespace dpl::supervision
