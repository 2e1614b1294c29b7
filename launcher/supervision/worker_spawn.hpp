// Starting a machine's workers: one fork + exec of the worker loader (protocol/worker_command.hpp),
// which loads the plugins and the data once, forks the workers and names their pids on its report
// pipe (Note [One load per machine] in worker/worker_main.cpp). The launcher is a child subreaper,
// so the workers become its children once the loader exits.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.hpp"

namespace dpl::supervision {

// What the worker loader runs with.
struct LoaderLaunch {
  std::vector<std::string> job_flags;    // cli::LauncherArguments of the workers' options
  std::vector<std::string> environment;  // NAME=value, the workers' whole environment
  std::string store_addr;                // host:port of the job's store, for the workers
  int workers = 1;                       // this machine's, --num-processes
};

// The workers once started: pid and the read end of the stdout+stderr pipe of each, in
// local-rank order. The caller owns the descriptors.
struct SpawnedWorkers {
  std::vector<pid_t> pids;
  std::vector<int> output_fds;
  // A program's standard output, a pipe of its own per worker (output_fds then carry its standard
  // error), so that the launcher's standard output is the programs'; empty for the built-in
  // loop's workers.
  std::vector<int> standard_output_fds;
};

// Starts the loader and waits until it named the workers and exited. DPL_ERR_INVALID_ARGUMENT
// when it refused the job before starting any (data or a model that cannot work: no restart
// helps), with its reason; another error when it failed or a stop signal came first.
Result<SpawnedWorkers> SpawnWorkers(const LoaderLaunch& launch);

}  // namespace dpl::supervision
