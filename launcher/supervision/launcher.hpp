// The launcher role of `launcher` (one per machine): serves the store on machine 0, joins the
// job, runs the machine's workers through a Supervisor, and restarts the whole job from its
// newest checkpoint when a worker fails, up to --max-restarts times.
#pragma once

#include "cli/options.hpp"

namespace dpl::supervision {

// Returns the process exit code.
int RunLauncher(const cli::Options& options);

}  // namespace dpl::supervision
