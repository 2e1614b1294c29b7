// The two process roles of `launcher`.
#pragma once

#include "cli/options.hpp"

namespace dpl::supervision {

// The launcher role (one per machine): serves the store on machine 0, joins the job, starts
// --num-processes workers (fork-then-exec of `launcher --worker`, before any thread pool exists),
// supervises them and stops the whole job when one fails. Returns the process exit code.
int RunLauncher(const cli::Options& options);

// The worker role: connects to the store, loads and creates the backend, then runs the selftest
// or training::RunTraining. Returns the process exit code.
int RunWorker(const cli::Options& options);

}  // namespace dpl::supervision
