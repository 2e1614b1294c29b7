// The one place that decides what a worker computes on and with how many threads: its rank in the
// job, its device (CPU, or the CUDA device numbered like its local rank, as the recipe's
// cuda.set_device(local_index); workers share the GPUs in turn when a machine has fewer GPUs than
// workers), and its intra-op thread count (cli::ThreadsPerWorker, which the launcher also puts
// into the workers' OpenMP variables).
#pragma once

#include <string>

#include "cli/options.hpp"
#include "common/status.hpp"
#include "training/worker_identity.hpp"

namespace dpl::worker {

// The CUDA devices this process can see (CUDA_VISIBLE_DEVICES applies), asked of the driver
// (libcuda, loaded only when asked); 0 without a driver or a GPU.
int VisibleCudaDevices();

// Who worker `local_rank` of this machine is and what it uses, on a machine with `cuda_devices`
// GPUs (only asked for --device cuda).
training::WorkerIdentity PlaceWorker(const cli::Options& options, int local_rank, int cuda_devices);

// Refuses a backend that cannot share a GPU between workers (nccl) when this machine's workers
// outnumber its GPUs, saying why and what to use instead.
Status CheckBackendFitsDevices(const std::string& backend, const training::WorkerIdentity& identity,
                               int cuda_devices);

// Sets RANK, LOCAL_RANK and ROLE_RANK in this worker's environment, as torchrun gives them to
// its workers (the launcher sets the variables its machine's workers share:
// supervision/worker_environment.hpp). Call it before the worker starts any thread.
void ExportRankVariables(const cli::Options& options, int local_rank);

}  // namespace dpl::worker
