// The data-parallel training loop run by each worker process (docs/recipe.md): sharded
// sampling, per-rank batch = global batch / world size, parameters broadcast from rank 0,
// gradients averaged through the backend in buckets overlapping backward, identical optimizer
// steps on every rank, rank-0 reporting, checkpoints, evaluation. The loop itself is short; its
// parts are the placement strategy (placement.hpp), the reporter (reporter.hpp), the checkpoint
// policy (checkpoint_policy.hpp) and the evaluation (evaluation.hpp).
#pragma once

#include "common/status.hpp"
#include "training/backend.hpp"
#include "training/config.hpp"
#include "training/data.hpp"
#include "training/evaluation.hpp"
#include "training/local_reduce.hpp"
#include "training/model.hpp"
#include "training/preemption.hpp"
#include "training/worker_identity.hpp"

namespace dpl::training {

// Runs the whole training job for this rank on `data` (OpenTrainingData). `backend` is
// connected (NULL at world size 1 is allowed); the model plugin is loaded but no instance exists
// yet; `local` names the machine's other workers and their shared memory (none by default).
// Returns when training is done or failed, or (Ok) once `preemption` said to stop at a step
// boundary and that step's checkpoint is written (Note [Preemption] in preemption.cpp).
Status RunTraining(const TrainingConfig& config, const WorkerIdentity& identity, Backend* backend,
                   const ModelPlugin& model_plugin, TrainingData data,
                   SumAcrossRanks sum_across_ranks, const LocalGroup& local = {},
                   PreemptionCheck preemption = nullptr);

}  // namespace dpl::training
