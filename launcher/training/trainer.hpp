// The data-parallel training loop run by each worker process (RECIPE.md sections 1-2):
// sharded sampling, per-rank batch = global batch / world size, parameters broadcast from rank 0,
// gradients averaged through the backend in buckets overlapping backward, identical optimizer
// steps on every rank, rank-0 logging, checkpoints.
#pragma once

#include <functional>
#include <future>
#include <vector>

#include "cli/options.hpp"
#include "common/status.hpp"
#include "dpl/backend.h"
#include "dpl/model.h"
#include "training/idx_dataset.hpp"

namespace dpl::training {

struct WorkerIdentity {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int threads = 1;
};

// The data sets a run reads: the training set and, unless --no-eval, the test set.
struct TrainingData {
  Dataset train;
  Dataset test;  // empty (count 0) with --no-eval
};

// Starts reading and decompressing the data sets on a background thread, so that this overlaps the
// worker's other start-up work (loading plugins, the rendezvous, the backend's connections).
std::future<Result<TrainingData>> StartLoadingData(const cli::Options& options);

// Adds a few host numbers element-wise over all ranks; every rank gets the same sums. The test-set
// totals go through it whatever memory the backend moves (the launcher uses the store).
using SumAcrossRanks = std::function<Status(const std::string& name, std::vector<double>* values)>;

// The connected backend a worker trains with, and the memory it was created for: kDLCPU, or
// kDLCUDA for a backend that moves device tensors (nccl).
struct TrainingBackend {
  const dpl_backend_plugin_v1* plugin = nullptr;
  dpl_backend* backend = nullptr;
  int32_t device_type = kDLCPU;
};

// Runs the whole training job for this rank on `data` (from StartLoadingData). The backend is
// created and connected; `model_plugin` (any supported model ABI, adapted to the newest table) is
// loaded but no instance exists yet. Returns when training is done or failed.
Status RunTraining(const cli::Options& options, const WorkerIdentity& identity,
                   const TrainingBackend& backend, const dpl_model_plugin_v2& model_plugin,
                   std::future<Result<TrainingData>> data, SumAcrossRanks sum_across_ranks);

}  // namespace dpl::training
