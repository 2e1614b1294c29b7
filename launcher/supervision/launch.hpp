// The two process roles of `launcher`.
#pragma once

#include "cli/options.hpp"

namespace dpl::supervision {

// The launcher role (one per machine): serves the store on machine 0, joins the job, starts
// --num-processes workers (through one worker loader that loads the plugins and the data once and
// forks them, Note [One load per machine]), supervises them and stops the whole job when one
// fails. Returns the process exit code.
int RunLauncher(const cli::Options& options);

// The worker role (`--worker`). With --worker-outputs: the machine's worker loader, which loads
// once and forks the workers. With --local-rank: one worker, which loads on its own. A worker
// connects to the store, creates the backend, then runs the selftest or training::RunTraining.
// Returns the process exit code.
int RunWorker(const cli::Options& options);

}  // namespace dpl::supervision
