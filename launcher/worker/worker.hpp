// The worker role of `launcher` (`--worker`), started by a launcher, never by hand.
#pragma once

#include "cli/options.hpp"
#include "protocol/worker_output.hpp"

namespace dpl::worker {

// A worker whose failure follows from a peer's exits with this code (protocol/worker_output.hpp).
using protocol::kPeerFailureExitCode;

// With --worker-outputs: the machine's worker loader, which loads the plugins and the data once
// and forks the workers (Note [One load per machine]). With --local-rank: one worker, which loads
// on its own. A worker joins the job, creates the backend, then runs the selftest or the
// training. Returns the process exit code.
int RunWorker(const cli::Options& options);

}  // namespace dpl::worker
