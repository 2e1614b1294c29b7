// How a launcher names a failure: a worker's exit, the last lines it wrote, and the machines that
// vanished before it.
//
// Note [Root cause]: when a rank fails, its peers fail too, a moment later: their backend sees
// the closed connection or times out waiting, and so would a store call. Whichever exit the
// launcher happens to see first is no root cause, and a launcher killed with its workers leaves
// no failed worker to name at all. So a worker tells by its exit code
// (protocol::kPeerFailureExitCode) whether its failure follows from a peer's, and a launcher
// whose first failed worker is such a consequence looks for the failure it follows from, for up
// to kHeartbeatSilence: another local worker that failed on its own (named at once), a failure
// another launcher published, or, on a job of several machines, a machine whose launcher stopped
// its heartbeat (heartbeat.hpp). Only when none shows up is the first consequence named. A job on
// one machine stops looking as soon as all its workers exited. Failures are published only once
// named, the first published wins, and every launcher takes a published failure as the job's
// (Supervisor::FailedAfterPeer).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <string>
#include <vector>

#include "supervision/output_tail.hpp"

namespace dpl::supervision {

// Whose exit codes a worker's are: dpl's worker protocol (protocol::kPeerFailureExitCode says
// that a peer failed first) or a program's own (Note [A program's workers]).
enum class ExitCodes { kWorkerProtocol, kProgram };

// "exit code 1" or "killed by signal 9 (SIGKILL)" for a waitpid status; a peer failure's exit code
// says so.
std::string DescribeExit(int wait_status, ExitCodes codes = ExitCodes::kWorkerProtocol);

// One worker that ended, as its failure names it.
struct EndedWorker {
  int rank = 0;
  int machine = 0;
  int local_rank = 0;
  pid_t pid = -1;
  int wait_status = 0;
  const std::deque<std::string>* last_lines = nullptr;  // OutputTail::Lines(); may be null
  ExitCodes codes = ExitCodes::kWorkerProtocol;
};

// kRootCause: the job's failure is this worker's; kAfterPeer: it failed after something else.
enum class FailureRole { kRootCause, kAfterPeer };

// "rank 3 (machine 1, local rank 1, pid 42) failed first: exit code 1; the last lines of its log
// (the root cause):" and the lines, indented. A program's: "...; the end of its output (the root
// cause):".
std::string DescribeFailure(const EndedWorker& worker, FailureRole role);

// "machine 2 vanished: its launcher stopped answering (...); after it, " and `after`, the failure
// of a worker that followed (DescribeFailure of kAfterPeer).
std::string DescribeVanished(const std::vector<int>& machines, const std::string& after);

// "machine 2 vanished: its launcher stopped answering (...); the attempt ends on every machine,
// ...": a machine lost while every worker here still ran (Note [Lost machines] in heartbeat.hpp).
std::string DescribeLost(const std::vector<int>& machines);
// The same for an attempt that regroups in place: which machines, and how they were found lost.
std::string DescribeLostInPlace(const std::vector<int>& machines,
                                std::chrono::milliseconds silence);

}  // namespace dpl::supervision
