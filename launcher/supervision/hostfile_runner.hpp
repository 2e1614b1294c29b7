// One command for many machines: `launcher --hostfile FILE ...` starts a launcher with the same
// flags on every host FILE lists (cluster/hostfile.hpp), machine i on the i-th host: here for a
// host that is this machine, over OpenSSH for the others (cluster/remote_command.hpp: batch mode,
// this working directory and binary path, the job token through ssh's standard input). It prints
// each machine's output prefixed with its host, and stops every machine when one fails, on
// SIGINT or on SIGTERM.
#pragma once

#include "cli/options.hpp"

namespace dpl::supervision {

// Returns the process exit code: 0 when every machine's launcher exited 0.
int RunHostfile(const cli::Options& options);

}  // namespace dpl::supervision
