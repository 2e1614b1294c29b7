// The one place that decides what a worker computes on and with how many threads: its rank in the
// job, its device (CPU or the CUDA device numbered like its local rank, as the recipe's
// cuda.set_device(local_index)), and its intra-op thread count (--threads-per-worker, or the
// machine's cores shared evenly by its workers).
#pragma once

#include "cli/options.hpp"
#include "training/trainer.hpp"

namespace dpl::worker {

// Threads for each worker of this machine; the launcher also puts them into OMP_NUM_THREADS
// (and MKL's, OpenBLAS's) of the workers' environment.
int ThreadsPerWorker(const cli::Options& options);

// Who worker `local_rank` of this machine is and what it uses.
training::WorkerIdentity PlaceWorker(const cli::Options& options, int local_rank);

// Sets RANK, LOCAL_RANK and ROLE_RANK in this worker's environment, as torchrun gives them to
// its workers (the launcher sets the variables its machine's workers share:
// supervision/worker_environment.hpp). Call it before the worker starts any thread.
void ExportRankVariables(const cli::Options& options, int local_rank);

}  // namespace dpl::worker
