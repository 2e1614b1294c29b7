// The memory a machine's workers share (Note [Shared memory of a machine] in
// training/collectives/shared_memory.hpp): the loader makes it, each worker finds it.
#pragma once

#include "cli/options.hpp"
#include "training/collectives/local_reduce.hpp"
#include "training/worker_identity.hpp"

namespace dpl::worker {

// Where the loader tells its workers, forked or started fresh, the descriptor of the memory file.
inline constexpr const char* kLocalMemoryEnvironmentVariable = "DPL_LOCAL_MEMORY_FD";

// In the loader, before it starts the workers of a machine with several: an empty memory file
// whose descriptor the workers inherit (across exec too), named in the environment. Says why in
// the log when the system refuses it; the workers then sum through the backend.
void ShareMemoryWithWorkers(const cli::Options& options);

// This worker's machine as the training sees it; its shared memory (-1 when there is none) and
// `across_machines` (NULL unless several machines sum through shared memory).
training::LocalGroup LocalGroupOf(const cli::Options& options,
                                  const training::WorkerIdentity& identity,
                                  training::Backend* across_machines);

// Whether this worker sums its part of the gradients across machines through a backend
// instance of its own (several machines, several workers a machine, --local-reduce shm on the
// CPU, a shared memory to sum in).
bool SumsAcrossMachines(const cli::Options& options);

}  // namespace dpl::worker
