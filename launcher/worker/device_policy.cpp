#include "worker/device_policy.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

namespace dpl::worker {

int ThreadsPerWorker(const cli::Options& options) {
  if (options.threads_per_worker > 0) return options.threads_per_worker;
  const unsigned cores = std::thread::hardware_concurrency();
  return std::max(1, static_cast<int>(cores) / std::max(1, options.num_processes));
}

training::WorkerIdentity PlaceWorker(const cli::Options& options, int local_rank) {
  training::WorkerIdentity identity;
  identity.local_rank = local_rank;
  identity.local_world_size = options.num_processes;
  identity.rank = options.machine_id * options.num_processes + local_rank;
  identity.world_size = options.num_machines * options.num_processes;
  identity.threads = ThreadsPerWorker(options);
  const bool cuda = options.training.device == training::Device::kCuda;
  identity.device_type = cuda ? kDLCUDA : kDLCPU;
  identity.device_id = cuda ? local_rank : 0;
  return identity;
}

void ExportRankVariables(const cli::Options& options, int local_rank) {
  const training::WorkerIdentity identity = PlaceWorker(options, local_rank);
  setenv("RANK", std::to_string(identity.rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(identity.local_rank).c_str(), 1);
  setenv("ROLE_RANK", std::to_string(identity.rank).c_str(), 1);
}

}  // namespace dpl::worker
