#include "protocol/worker_output.hpp"

#include <sys/wait.h>

#include "common/log.hpp"

namespace dpl::protocol {
namespace {

// The severity whose tag starts `text`; info when none does.
dpl_log_level SeverityOf(const std::string& text) {
  for (dpl_log_level level : {DPL_LOG_ERROR, DPL_LOG_WARNING, DPL_LOG_DEBUG}) {
    const std::string tag = log::LevelTag(level);
    if (text.compare(0, tag.size(), tag) == 0) return level;
  }
  return DPL_LOG_INFO;
}

}  // namespace

bool IsPeerFailure(int wait_status) {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kPeerFailureExitCode;
}

bool IsNotRestartable(int wait_status) {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kNotRestartableExitCode;
}

bool IsPreempted(int wait_status) {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kPreemptedExitCode;
}

WorkerLine ReadWorkerLine(const std::string& line) {
  WorkerLine read;
  if (IsProgressRecord(line)) {
    read.kind = WorkerLine::Kind::kProgress;
    read.progress = DecodeProgress(line);
    return read;
  }
  size_t message = 0;
  if (!line.empty() && line.front() == '[') {
    const size_t end_of_prefix = line.find("] ");
    if (end_of_prefix != std::string::npos) message = end_of_prefix + 2;
  }
  read.severity = SeverityOf(line.substr(message));
  return read;
}

}  // namespace dpl::protocol
