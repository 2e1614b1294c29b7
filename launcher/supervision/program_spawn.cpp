#include "supervision/program_spawn.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "protocol/program_environment.hpp"

namespace dpl::supervision {
namespace {

using namespace std::chrono_literals;

// execvp's search path when PATH is not set.
constexpr const char* kDefaultSearchPath = "/usr/local/bin:/usr/bin:/bin";
// SIGKILL ends a process group's processes at once; this bounds the wait for one that cannot die
// yet (in an uninterruptible sleep).
constexpr auto kReleaseTimeout = 2s;

std::string Named(const std::string& program) {
  return "the program '" + program + "' (after --)";
}

// Why `path` cannot be run, or "".
std::string NotRunnable(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) return strerror(errno);
  if (S_ISDIR(info.st_mode)) return "it is a folder";
  if (access(path.c_str(), X_OK) != 0) {
    return "it is not executable (chmod +x it, or give its interpreter first: -- python3 " + path +
           ")";
  }
  return "";
}

// A pipe for a worker's output, both ends closed at exec.
Status OpenPipe(int ends[2]) {
  if (pipe2(ends, O_CLOEXEC) == 0) return Status::Ok();
  return Status::Error(std::string("cannot create a pipe for the workers: ") + strerror(errno));
}

void CloseAll(std::vector<int>* fds) {
  for (int fd : *fds) close(fd);
  fds->clear();
}

// Everything one child needs, ready before fork().
struct ChildPlan {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  int input_fd = -1;            // /dev/null
  int standard_output_fd = -1;  // the write end of its standard output's pipe
  int standard_error_fd = -1;   // the write end of its standard error's pipe
  int status_fd = -1;           // the write end of the pipe that carries execve's errno
  pid_t launcher = -1;
  int max_fd = 0;  // the descriptors to close when close_range cannot
};

// In the child, async-signal-safe calls only (Note [Starting workers safely]).
[[noreturn]] void RunChild(const ChildPlan& plan) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != plan.launcher) _exit(127);
  setpgid(0, 0);
  dup2(plan.input_fd, STDIN_FILENO);
  dup2(plan.standard_output_fd, STDOUT_FILENO);
  dup2(plan.standard_error_fd, STDERR_FILENO);
  // The store's sockets and the other ranks' pipes are no business of the program.
  if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = 3; fd < plan.max_fd; ++fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  for (int signal_number : {SIGINT, SIGTERM, SIGPIPE}) signal(signal_number, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(plan.path, plan.argv, plan.envp);
  const int error = errno;
  (void)!write(plan.status_fd, &error, sizeof error);
  _exit(127);
}

// The errno of a child's failed execve, or 0 once it ran the program (the pipe closed at exec).
int ExecError(int status_read_fd) {
  int error = 0;
  ssize_t count;
  do {
    count = read(status_read_fd, &error, sizeof error);
  } while (count < 0 && errno == EINTR);
  return count == static_cast<ssize_t>(sizeof error) ? error : 0;
}

// The interpreter a script's "#!" line names ("" when it has none).
std::string InterpreterOf(const char* path) {
  std::ifstream file(path, std::ios::binary);
  std::string line;
  if (!std::getline(file, line) || line.rfind("#!", 0) != 0) return "";
  const size_t start = line.find_first_not_of(" \t", 2);
  if (start == std::string::npos) return "";
  return line.substr(start, line.find_first_of(" \t\r", start) - start);
}

// Forks one worker; its pid, or why the program could not be started.
Result<pid_t> StartOne(ChildPlan plan, const std::string& program) {
  int status[2];
  if (pipe2(status, O_CLOEXEC) != 0) {
    return Status::Error(std::string("cannot create a pipe for the workers: ") + strerror(errno));
  }
  plan.status_fd = status[1];
  const pid_t pid = fork();
  if (pid == 0) RunChild(plan);
  close(status[1]);
  if (pid < 0) {
    close(status[0]);
    return Status::Error(std::string("cannot start worker processes (fork): ") + strerror(errno));
  }
  setpgid(pid, pid);  // as the child does: whichever runs first, the group exists after both
  const int error = ExecError(status[0]);
  close(status[0]);
  if (error == 0) return pid;
  waitpid(pid, nullptr, 0);
  std::string reason = strerror(error);
  if (error == ENOEXEC) reason += " (a script needs a #! line, or give its interpreter first)";
  // The program was found runnable (FindProgram), so a missing file is its #! line's interpreter.
  const std::string interpreter = error == ENOENT ? InterpreterOf(plan.path) : "";
  if (!interpreter.empty()) {
    reason = "its #! line names the interpreter " + interpreter +
             ", which does not exist; fix that line, or give an interpreter first";
  }
  return Status::InvalidArgument("cannot start " + Named(program) + ": " + reason);
}

}  // namespace

Result<std::string> FindProgram(const std::string& program, const std::string& search_path) {
  if (program.find('/') != std::string::npos) {
    const std::string why = NotRunnable(program);
    if (why.empty()) return program;
    return Status::InvalidArgument("cannot start " + Named(program) + ": " + why);
  }
  const std::string path = search_path.empty() ? kDefaultSearchPath : search_path;
  size_t start = 0;
  for (;;) {
    const size_t colon = path.find(':', start);
    std::string folder = path.substr(start, colon - start);
    const std::string candidate = (folder.empty() ? "." : folder) + "/" + program;
    if (NotRunnable(candidate).empty()) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return Status::InvalidArgument(Named(program) + " is not on PATH (" + path +
                                 "): check its name, or give its path");
}

Result<SpawnedWorkers> SpawnProgram(const ProgramLaunch& launch) {
  // Looked for on the workers' PATH (--env may give another), before any of them starts.
  const char* search_path = protocol::FindVariable(launch.environments.at(0), "PATH");
  DPL_ASSIGN_OR_RETURN(auto path, FindProgram(launch.argv.at(0), search_path ? search_path : ""));
  std::vector<std::string> argv_text = launch.argv;
  std::vector<char*> argv;
  for (auto& argument : argv_text) argv.push_back(argument.data());
  argv.push_back(nullptr);
  std::vector<std::vector<std::string>> environments = launch.environments;
  const int input = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (input < 0) return Status::Error(std::string("cannot open /dev/null: ") + strerror(errno));
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  SpawnedWorkers spawned;
  Status failure = Status::Ok();
  for (auto& environment : environments) {
    std::vector<char*> envp;
    for (auto& entry : environment) envp.push_back(entry.data());
    envp.push_back(nullptr);
    int standard_output[2];
    int standard_error[2];
    failure = OpenPipe(standard_output);
    if (!failure.ok()) break;
    failure = OpenPipe(standard_error);
    if (!failure.ok()) {
      close(standard_output[0]);
      close(standard_output[1]);
      break;
    }
    const ChildPlan plan{path.c_str(),
                         argv.data(),
                         envp.data(),
                         input,
                         standard_output[1],
                         standard_error[1],
                         -1,
                         getpid(),
                         static_cast<int>(std::min<rlim_t>(files.rlim_cur, 65536))};
    Result<pid_t> pid = StartOne(plan, launch.argv[0]);
    close(standard_output[1]);
    close(standard_error[1]);
    if (!pid.ok()) {
      close(standard_output[0]);
      close(standard_error[0]);
      failure = pid.status();
      break;
    }
    spawned.pids.push_back(*pid);
    spawned.standard_output_fds.push_back(standard_output[0]);
    spawned.output_fds.push_back(standard_error[0]);  // a program's output_fds: its stderr
  }
  close(input);
  if (failure.ok()) return spawned;
  for (pid_t pid : spawned.pids) ReleaseProgramWorker(pid);
  CloseAll(&spawned.output_fds);
  CloseAll(&spawned.standard_output_fds);
  return failure;
}

std::optional<int> PeekExit(pid_t pid) {
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
      info.si_pid == 0) {
    return std::nullopt;
  }
  if (info.si_code == CLD_EXITED) return W_EXITCODE(info.si_status, 0);
  const int signaled = W_EXITCODE(0, info.si_status);
  return info.si_code == CLD_DUMPED ? signaled | WCOREFLAG : signaled;
}

void SignalProgramWorker(pid_t pid, int signal_number) {
  kill(-pid, signal_number);
}

void ReleaseProgramWorker(pid_t pid) {
  kill(-pid, SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + kReleaseTimeout;
  for (;;) {
    const pid_t reaped = waitpid(-pid, nullptr, WNOHANG);
    if (reaped > 0 || (reaped < 0 && errno == EINTR)) continue;
    if (reaped < 0 || std::chrono::steady_clock::now() >= deadline) return;  // none left
    std::this_thread::sleep_for(1ms);
  }
}

}  // namespace dpl::supervision
