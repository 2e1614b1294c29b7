// What a launcher reads of each of its workers: the lines of its output (stdout and stderr, one
// pipe) and its exit status.
//
// A line is a progress record (progress_record.hpp) or a log line as common/log.hpp writes it:
// the worker's prefix in brackets and a space ("[rank 3] "; none before the prefix is set), the
// severity's tag ("error: ", "warning: ", "debug: ", none for info), then the message. A line
// that a plugin or a library writes past the log (a crash report, a traceback) is an info line,
// whatever words it holds.
#pragma once

#include <optional>
#include <string>

#include "dpl/common.h"
#include "protocol/progress_record.hpp"

namespace dpl::protocol {

// The exit code of a worker whose failure follows from another process's: its backend or the
// store lost a peer or timed out waiting on one (DPL_ERR_COMMUNICATION, DPL_ERR_TIMEOUT). Any
// other failure exits with 1. The launcher looks for such another failure to name as the job's
// root cause (Note [Root cause] in supervision/failure_naming.hpp).
inline constexpr int kPeerFailureExitCode = 3;

// Whether a worker's waitpid status is kPeerFailureExitCode's.
bool IsPeerFailure(int wait_status);

// The exit code of a worker whose failure a restart would repeat: --check-replicas found that
// the replicas differ (Note [Replica check] in training/replica_check.hpp). The launcher does
// not restart the job after it (--max-restarts).
inline constexpr int kNotRestartableExitCode = 4;

// Whether a worker's waitpid status is kNotRestartableExitCode's.
bool IsNotRestartable(int wait_status);

// The exit code of a worker that stopped for a preemption once the checkpoint of the step every
// rank agreed on was written (Note [Preemption] in training/preemption.cpp), and of a launcher
// whose job stopped so: EX_TEMPFAIL of sysexits.h, "try again later". Not a failure: a launcher
// neither restarts the job nor names a root cause for it.
inline constexpr int kPreemptedExitCode = 75;

// Whether a worker's waitpid status is kPreemptedExitCode's.
bool IsPreempted(int wait_status);

struct WorkerLine {
  enum class Kind { kLog, kProgress };
  Kind kind = Kind::kLog;
  dpl_log_level severity = DPL_LOG_INFO;   // of a log line
  std::optional<ProgressRecord> progress;  // of a progress record that is well-formed
};

// What `line` (without its newline) is.
WorkerLine ReadWorkerLine(const std::string& line);

}  // namespace dpl::protocol
