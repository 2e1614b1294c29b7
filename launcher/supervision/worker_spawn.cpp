// Note [Starting workers safely]: workers are started with fork + exec of this same binary in
// worker mode. Everything the child needs (argv, environment, pipe ends) is prepared before
// fork(), and between fork() and execve() the child only makes async-signal-safe calls, so the
// store's threads in the launcher cannot leave the child with a held lock, and OpenMP/libtorch
// thread pools only ever start inside the fresh worker image.
//
// Note [No orphans]: each worker asks for SIGKILL when its parent dies (PR_SET_PDEATHSIG) and
// then checks that the parent did not die before that request took effect. The signal follows
// the thread that forked, so workers are forked from the launcher's main thread only.
#include "supervision/worker_spawn.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "protocol/loader_report.hpp"
#include "protocol/worker_command.hpp"
#include "supervision/failure_naming.hpp"
#include "supervision/stop_signals.hpp"

namespace dpl::supervision {
namespace {

constexpr int kReportPollMs = 100;

// Closes every descriptor of `fds` and clears it.
void CloseAll(std::vector<int>* fds) {
  for (int fd : *fds) close(fd);
  fds->clear();
}

void Reap(pid_t pid, int* status) {
  while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
}

// Everything the loader wrote on its report pipe until it closed it, or a stop signal's error.
Result<std::string> ReadReport(pid_t loader, int report_fd) {
  std::string report;
  for (;;) {
    if (StopSignal() != 0) {
      kill(loader, SIGKILL);
      waitpid(loader, nullptr, 0);
      return Status::Error("the launcher was stopped by signal " + SignalName(StopSignal()) +
                           " while its workers were starting");
    }
    pollfd fd{report_fd, POLLIN, 0};
    if (poll(&fd, 1, kReportPollMs) <= 0) continue;  // a timeout or a signal: look again
    char buffer[256];
    const ssize_t count = read(report_fd, buffer, sizeof buffer);
    if (count < 0 && errno == EINTR) continue;
    if (count <= 0) return report;
    report.append(buffer, static_cast<size_t>(count));
  }
}

// Waits until the worker loader named the pids of the workers it forked and exited; by then every
// worker is this launcher's child.
Result<std::vector<pid_t>> ReadWorkerPids(pid_t loader, int report_fd, int expected) {
  DPL_ASSIGN_OR_RETURN(std::string text, ReadReport(loader, report_fd));
  const protocol::LoaderReport report = protocol::DecodeLoaderReport(text);
  if (report.refused) {  // no worker was started
    Reap(loader, nullptr);
    return Status::InvalidArgument(report.reason);
  }
  if (expected == 1 && report.pids == std::vector<pid_t>{loader}) return report.pids;  // itself
  int status = 0;
  Reap(loader, &status);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
      static_cast<int>(report.pids.size()) != expected) {
    return Status::Error(
        "the process that loads the plugins and the data for this machine's "
        "workers (pid " +
        std::to_string(loader) + ") failed before it started " + std::to_string(expected) +
        " worker(s): " + DescribeExit(status) + "; its own messages, if any, are above");
  }
  return report.pids;
}

// Fork + exec of the worker loader (Note [Starting workers safely]): argv and environment are
// ready before fork(), and the child makes async-signal-safe calls only.
Result<pid_t> StartLoader(const std::vector<std::string>& command,
                          const std::vector<std::string>& environment,
                          const std::vector<int>& output_write_fds, int report_write_fd) {
  std::vector<std::string> argv_text = command, envp_text = environment;
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
    execve(protocol::kSelfExecutable, argv.data(), envp.data());
    _exit(127);
  }
  return loader;
}

// One pipe per worker for its stdout and stderr: read ends in `read_fds`, write ends in
// `write_fds`.
Status OpenOutputPipes(int workers, std::vector<int>* read_fds, std::vector<int>* write_fds) {
  for (int local = 0; local < workers; ++local) {
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
      const std::string reason = strerror(errno);
      CloseAll(read_fds);
      CloseAll(write_fds);
      return Status::Error("cannot create a pipe for the workers: " + reason);
    }
    read_fds->push_back(pipe_fds[0]);
    write_fds->push_back(pipe_fds[1]);
  }
  return Status::Ok();
}

}  // namespace

Result<SpawnedWorkers> SpawnWorkers(const LoaderLaunch& launch) {
  SpawnedWorkers spawned;
  std::vector<int> output_write_fds;
  DPL_RETURN_IF_ERROR(OpenOutputPipes(launch.workers, &spawned.output_fds, &output_write_fds));
  // The pipe on which the loader names the pids of the workers it forked.
  int report_fds[2];
  if (pipe2(report_fds, O_CLOEXEC) != 0) {
    const std::string reason = strerror(errno);
    CloseAll(&spawned.output_fds);
    CloseAll(&output_write_fds);
    return Status::Error("cannot create a pipe for the workers: " + reason);
  }
  const std::vector<std::string> command =
      protocol::WorkerLoaderCommand(launch.job_flags, output_write_fds, launch.store_addr);
  auto loader = StartLoader(command, launch.environment, output_write_fds, report_fds[1]);
  CloseAll(&output_write_fds);
  close(report_fds[1]);
  auto pids = loader.ok() ? ReadWorkerPids(*loader, report_fds[0], launch.workers)
                          : Result<std::vector<pid_t>>(loader.status());
  close(report_fds[0]);
  if (!pids.ok()) {
    CloseAll(&spawned.output_fds);
    return pids.status();
  }
  spawned.pids = std::move(*pids);
  return spawned;
}

}  // namespace dpl::supervision
