// The worker role of `launcher` (`--worker`), started by a launcher, never by hand.
#pragma once

#include "cli/options.hpp"

namespace dpl::worker {

// The exit code of a worker whose failure follows from another process's: its backend or the
// store lost a peer or timed out waiting on one (DPL_ERR_COMMUNICATION, DPL_ERR_TIMEOUT). Any
// other failure exits with 1. The launcher looks for such another failure to name as the job's
// root cause (Note [Root cause] in supervision/supervisor.cpp).
inline constexpr int kPeerFailureExitCode = 3;

// What a worker loader writes on its report pipe instead of the workers' pids when it refuses
// the job before starting any (Note [Refused before the workers start] in model_probe.cpp); the
// reason follows it.
inline constexpr char kJobRefusedReport[] = "refused\n";

// With --worker-outputs: the machine's worker loader, which loads the plugins and the data once
// and forks the workers (Note [One load per machine]). With --local-rank: one worker, which loads
// on its own. A worker joins the job, creates the backend, then runs the selftest or the
// training. Returns the process exit code.
int RunWorker(const cli::Options& options);

}  // namespace dpl::worker
