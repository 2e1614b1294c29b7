#include "supervision/failure_naming.hpp"

#include <sys/wait.h>

#include <csignal>

#include "protocol/worker_output.hpp"
#include "supervision/heartbeat.hpp"
#include "supervision/stop_signals.hpp"

namespace dpl::supervision {

std::string DescribeExit(int wait_status, ExitCodes codes) {
  if (WIFSIGNALED(wait_status)) {
    const int signal_number = WTERMSIG(wait_status);
    std::string described = "killed by signal " + SignalName(signal_number);
    // A worker killed by nobody it knows: most often the kernel, out of memory.
    if (signal_number == SIGKILL) {
      described +=
          ", which the kernel's out-of-memory killer sends when memory runs out (its log, dmesg, "
          "names what it killed)";
    }
    return described;
  }
  const std::string code = "exit code " + std::to_string(WEXITSTATUS(wait_status));
  const bool own_protocol = codes == ExitCodes::kWorkerProtocol;
  if (own_protocol && protocol::IsNotRestartable(wait_status)) {
    return code + " (a failure a restart would repeat)";
  }
  const bool peer = own_protocol && protocol::IsPeerFailure(wait_status);
  return peer ? code + " (it lost a peer or the rendezvous store)" : code;
}

std::string DescribeFailure(const EndedWorker& worker, FailureRole role) {
  const bool root = role == FailureRole::kRootCause;
  std::string message =
      "rank " + std::to_string(worker.rank) + " (machine " + std::to_string(worker.machine) +
      ", local rank " + std::to_string(worker.local_rank) + ", pid " + std::to_string(worker.pid) +
      ") failed" + (root ? " first" : "") + ": " + DescribeExit(worker.wait_status, worker.codes);
  if (worker.last_lines == nullptr || worker.last_lines->empty()) {
    return message + "; it wrote no output";
  }
  const bool program = worker.codes == ExitCodes::kProgram;
  message += program ? "; the end of its output" : "; the last lines of its log";
  message += root ? " (the root cause):" : ":";
  for (const auto& line : *worker.last_lines) message += "\n    " + line;
  return message;
}

namespace {

// "machine 2 vanished: its launcher stopped answering (no heartbeat ... for N ms: ...)".
std::string Vanished(const std::vector<int>& machines, std::chrono::milliseconds silence) {
  const bool one = machines.size() == 1;
  std::string message = one ? "machine " : "machines ";
  for (size_t i = 0; i < machines.size(); ++i) {
    message += (i == 0 ? "" : ", ") + std::to_string(machines[i]);
  }
  return message + " vanished: " + (one ? "its launcher" : "their launchers") +
         " stopped answering (no heartbeat in the rendezvous store for " +
         std::to_string(silence.count()) +
         " ms: killed, or the machine or the network to it is down)";
}

}  // namespace

std::string DescribeVanished(const std::vector<int>& machines, const std::string& after) {
  return Vanished(machines, kHeartbeatSilence) + "; after " +
         (machines.size() == 1 ? "it, " : "them, ") + after;
}

std::string DescribeLostInPlace(const std::vector<int>& machines,
                                std::chrono::milliseconds silence) {
  return Vanished(machines, silence);
}

std::string DescribeLost(const std::vector<int>& machines) {
  return Vanished(machines, kMachineLostSilence) +
         "; the attempt ends on every machine, its workers' collectives abandoned";
}

}  // namespace dpl::supervision
