// What the multi-machine tests share: a small data set in a folder of the test's own, training
// flags that take a second, ports, logs, dumped parameters, and two network namespaces joined by
// a veth pair (root only) as two machines.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "launcher_processes.hpp"
#include "support/idx_writer.hpp"

namespace dpl::test {

using Args = std::vector<std::string>;

inline bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Where a test's process writes its output: "<binary dir>/<test>-<name>.log".
inline std::string OutputPath(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = info->name();
  std::replace(test.begin(), test.end(), '/', '_');  // parameterised tests: "Name/0"
  return std::string(DPL_TEST_BINARY_DIR) + "/" + test + "-" + name + ".log";
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

inline std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = ReadFile(path);
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

// `command` through sh, its output discarded: true when it exited 0.
inline bool Quietly(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

// The first line of a launcher's output without its time stamp (--log-time iso, the default);
// a line without one is returned whole, so the comparison shows it.
inline std::string FirstLine(const std::string& output) {
  const std::string line = output.substr(0, output.find('\n'));
  static const std::regex stamp(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d )");
  std::smatch match;
  if (std::regex_search(line, match, stamp)) return line.substr(match.length(0));
  return line;
}

inline bool IsRoot() {
  return geteuid() == 0;
}

// A folder of the test's own, removed at the end, with a small MNIST-format data set: 1200
// training images (100 steps of 12) and 60 test images.
class JobFolder {
 public:
  JobFolder() {
    char pattern[] = "/tmp/dpl-cluster-XXXXXX";
    path_ = mkdtemp(pattern);
    using namespace dpl::testing;
    WriteGz(path_ + "/train-images-idx3-ubyte.gz", IdxImages(1200, 28, 28));
    WriteGz(path_ + "/train-labels-idx1-ubyte.gz", IdxLabels(1200));
    WriteGz(path_ + "/t10k-images-idx3-ubyte.gz", IdxImages(60, 28, 28));
    WriteGz(path_ + "/t10k-labels-idx1-ubyte.gz", IdxLabels(60));
    std::filesystem::create_directories(path_ + "/params");
  }
  ~JobFolder() { std::filesystem::remove_all(path_); }
  JobFolder(const JobFolder&) = delete;
  JobFolder& operator=(const JobFolder&) = delete;

  const std::string& path() const { return path_; }
  std::string Params(int rank) const {
    return path_ + "/params/rank-" + std::to_string(rank) + ".bin";
  }

  // A short training run of the MLP through the tcp backend, one thread per worker.
  Args Training(int max_steps) const {
    return {"--plugin-dir",
            DPL_TEST_PLUGIN_DIR,
            "--model",
            "mlp",
            "--backend",
            "tcp",
            "--data-dir",
            path_,
            "--data-cache",
            "none",
            "--no-progress",
            "--no-eval",
            "--threads-per-worker",
            "1",
            "--seed",
            "5",
            "--batch-size",
            "12",
            "--epochs",
            "100",
            "--max-steps",
            std::to_string(max_steps),
            "--log-interval",
            "10",
            "--dump-parameters",
            path_ + "/params"};
  }

 private:
  std::string path_;
};

inline Args Concat(Args head, const Args& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

// Two network namespaces joined by a veth pair: 10.<net>.0.1 in the first, 10.<net>.0.2 in the
// second, each with its loopback up. Needs root; ok() says whether they could be made.
class NamespacePair {
 public:
  explicit NamespacePair(int net) {
    const std::string suffix = std::to_string(getpid() % 100000);
    first_ = "dplc-a-" + suffix;
    second_ = "dplc-b-" + suffix;
    address_[0] = "10." + std::to_string(net) + ".0.1";
    address_[1] = "10." + std::to_string(net) + ".0.2";
    const std::string veth_a = "dca" + suffix, veth_b = "dcb" + suffix;
    ok_ = Quietly("ip netns add " + first_) && Quietly("ip netns add " + second_) &&
          Quietly("ip link add " + veth_a + " netns " + first_ + " type veth peer name " + veth_b +
                  " netns " + second_) &&
          Quietly("ip -n " + first_ + " addr add " + address_[0] + "/24 dev " + veth_a) &&
          Quietly("ip -n " + second_ + " addr add " + address_[1] + "/24 dev " + veth_b) &&
          Quietly("ip -n " + first_ + " link set " + veth_a + " up") &&
          Quietly("ip -n " + second_ + " link set " + veth_b + " up") &&
          Quietly("ip -n " + first_ + " link set lo up") &&
          Quietly("ip -n " + second_ + " link set lo up");
  }
  ~NamespacePair() {
    Quietly("ip netns delete " + first_);
    Quietly("ip netns delete " + second_);
  }
  NamespacePair(const NamespacePair&) = delete;
  NamespacePair& operator=(const NamespacePair&) = delete;

  bool ok() const { return ok_; }
  const std::string& address(int index) const { return address_[index]; }
  // The prefix that runs a command in namespace `index`.
  Args In(int index) const { return {"ip", "netns", "exec", index == 0 ? first_ : second_}; }

 private:
  std::string first_, second_;
  std::string address_[2];
  bool ok_ = false;
};

// Any program started with its stdout and stderr in one file, in the test's process group or in
// one of its own (as a shell's job, which Ctrl-C signals whole); killed when destroyed.
class ChildProcess {
 public:
  ChildProcess(Args argv, const std::string& output_path, ProcessGroup group = ProcessGroup::kTests)
      : output_path_(output_path) {
    std::vector<char*> pointers;
    for (auto& argument : argv) pointers.push_back(argument.data());
    pointers.push_back(nullptr);
    const int fd = open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = fork();
    if (pid_ == 0) {
      if (group == ProcessGroup::kOwn) setpgid(0, 0);
      dup2(fd, 1);
      dup2(fd, 2);
      execvp(pointers[0], pointers.data());
      _exit(127);
    }
    if (group == ProcessGroup::kOwn) setpgid(pid_, pid_);  // whichever runs first
    close(fd);
  }
  ~ChildProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGTERM);
      for (int i = 0; i < 500 && !Exited(); ++i) usleep(10000);
      if (!exited_) kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool Exited() {
    if (!exited_ && waitpid(pid_, &status_, WNOHANG) == pid_) exited_ = true;
    return exited_;
  }
  bool Succeeded() const { return exited_ && WIFEXITED(status_) && WEXITSTATUS(status_) == 0; }
  std::string Output() const { return ReadFile(output_path_); }
  // Polls until the output holds `part` (true) or `timeout` passes.
  bool WaitForOutput(const std::string& part, std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!Contains(Output(), part)) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      usleep(10000);
    }
    return true;
  }

 private:
  std::string output_path_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
};

// Waits until one of `launchers` says "this is machine <id>" and returns it (nullptr if none did).
inline LauncherProcess* MachineNumbered(std::vector<LauncherProcess*> launchers, int id) {
  const std::string line = "this is machine " + std::to_string(id) + " (";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    for (LauncherProcess* launcher : launchers) {
      if (Contains(launcher->Output(), line)) return launcher;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return nullptr;
}

inline bool WaitForFile(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// A process whose command line holds `part`, or -1.
inline pid_t ProcessWithArgument(const std::string& part) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return -1;
  pid_t found = -1;
  while (dirent* entry = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0) continue;
    std::string cmdline = ReadProcFile(pid, "cmdline");
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    if (Contains(cmdline, part)) {
      found = pid;
      break;
    }
  }
  closedir(proc);
  return found;
}

}  // namespace dpl::test
