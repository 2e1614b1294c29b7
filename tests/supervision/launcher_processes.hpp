// Starting real `launcher` processes for the supervision tests and looking at what they leave.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace dpl::test {

// Whether a launcher runs in the test's process group or in one of its own, which a test can kill
// whole (kill(-pid, ...)), as a machine going down takes the launcher, loader and workers.
enum class ProcessGroup { kTests, kOwn };

// A launcher started with its stdout and stderr in one file.
class LauncherProcess {
 public:
  LauncherProcess(const std::vector<std::string>& arguments, const std::string& output_path,
                  const std::vector<std::string>& prefix = {},
                  ProcessGroup group = ProcessGroup::kTests)
      : output_path_(output_path) {
    std::vector<std::string> all = prefix;
    all.push_back(DPL_TEST_LAUNCHER);
    all.insert(all.end(), arguments.begin(), arguments.end());
    std::vector<char*> argv;
    for (auto& argument : all) argv.push_back(argument.data());
    argv.push_back(nullptr);
    // Truncated here, not in the child, so no reader ever sees an earlier run's output.
    const int fd = open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = fork();
    if (pid_ == 0) {
      if (group == ProcessGroup::kOwn) setpgid(0, 0);
      dup2(fd, 1);
      dup2(fd, 2);
      execvp(argv[0], argv.data());
      _exit(127);
    }
    if (group == ProcessGroup::kOwn) setpgid(pid_, pid_);  // whichever runs first
    close(fd);
  }
  ~LauncherProcess() {
    if (!exited_) {
      kill(pid_, SIGKILL);
      Wait(std::chrono::seconds(5));
    }
  }

  pid_t pid() const { return pid_; }

  // The wait status once the process exited within `timeout`.
  std::optional<int> Wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!exited_) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        status_ = status;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return status_;
  }

  std::string Output() const {
    std::ifstream file(output_path_);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }

  // Waits for "rendezvous store listening on port N for ..." and returns N (0 if it never came).
  int WaitForStorePort(std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    const std::regex pattern(
        "listening on port ([0-9]+) for");  // "for": the whole number was written
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch match;
      const std::string text = Output();
      if (std::regex_search(text, match, pattern)) return std::stoi(match[1]);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  }

 private:
  std::string output_path_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
};

// A port nothing listens on (bound, then released) on 127.0.0.1.
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

// How often `part` occurs in `text`.
inline int Occurrences(const std::string& text, const std::string& part) {
  int count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) {
    ++count;
  }
  return count;
}

inline std::string ReadProcFile(pid_t pid, const char* name) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/" + name);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// True while `pid` exists and is not a zombie.
inline bool IsAlive(pid_t pid) {
  const std::string stat = ReadProcFile(pid, "stat");
  if (stat.empty()) return false;
  const auto close_paren = stat.rfind(')');
  return close_paren != std::string::npos && stat.size() > close_paren + 2 &&
         stat[close_paren + 2] != 'Z';
}

// The live children of `parent` that are workers: a worker names itself dpl-rank-<rank>.
inline std::vector<pid_t> WorkersOf(pid_t parent) {
  std::vector<pid_t> workers;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return workers;
  while (dirent* entry = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0) continue;
    const std::string stat = ReadProcFile(pid, "stat");
    const auto close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(close_paren + 2));
    char state = 0;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid != parent || state == 'Z') continue;
    if (ReadProcFile(pid, "comm").rfind("dpl-rank-", 0) == 0) workers.push_back(pid);
  }
  closedir(proc);
  return workers;
}

// The worker of `parent` with this global rank, or -1.
inline pid_t WorkerWithRank(pid_t parent, int rank) {
  for (pid_t pid : WorkersOf(parent)) {
    if (ReadProcFile(pid, "comm") == "dpl-rank-" + std::to_string(rank) + "\n") return pid;
  }
  return -1;
}

// Polls until `parent` has `count` workers (true) or the timeout passes.
inline bool WaitForWorkers(pid_t parent, size_t count, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (WorkersOf(parent).size() >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Polls until none of `pids` is alive (true) or the timeout passes.
inline bool WaitUntilGone(const std::vector<pid_t>& pids, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    bool any = false;
    for (pid_t pid : pids) any = any || IsAlive(pid);
    if (!any) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

inline std::string Describe(std::optional<int> status) {
  if (!status) return "still running";
  if (WIFSIGNALED(*status)) return "signal " + std::to_string(WTERMSIG(*status));
  return "exit " + std::to_string(WEXITSTATUS(*status));
}

inline bool ExitedWith(std::optional<int> status, int code) {
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == code;
}

}  // namespace dpl::test
