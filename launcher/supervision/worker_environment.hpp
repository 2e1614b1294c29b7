// The environment a machine's workers start with: the launcher's own, minus what it sets itself;
// thread counts for OpenMP, MKL and OpenBLAS; the attempt number; the job token (never in argv,
// which every user can read in `ps`); the variables torchrun gives its workers (Note [torchrun's
// worker variables]); and the heap settings of Note [Worker heap].
#pragma once

#include <string>
#include <vector>

#include "cli/options.hpp"
#include "rendezvous/join.hpp"

namespace dpl::supervision {

using rendezvous::kAttemptEnvironmentVariable;

inline constexpr const char* kJobTokenEnv = "DPL_JOB_TOKEN";

// NAME=value entries for the workers of `attempt`, each using `threads` compute threads.
// `options` are the attempt's: its number of machines, this machine's place in it, and the port
// the store serves on.
std::vector<std::string> WorkerEnvironment(const cli::Options& options, int threads, int attempt);

// Adds Note [Worker heap]'s settings to `environment` unless the user made their own.
void AddWorkerHeapSettings(std::vector<std::string>* environment);

}  // namespace dpl::supervision
