// The data-parallel training loop run by each worker process (docs/recipe.md): sharded
// sampling, per-rank batch = global batch / world size, parameters broadcast from rank 0,
// gradients averaged through the backend in buckets overlapping backward, identical optimizer
// steps on every rank, rank-0 reporting, checkpoints, evaluation. The loop itself is short; a step
// is its three parts in turn (step_parts.hpp: the placement, the reducer, the optimizer runner),
// and around it are the reporter (reporter.hpp), the checkpoint policy (checkpoint_policy.hpp) and
// the evaluation (evaluation.hpp). Every collective goes through the attempt's front
// (collectives/collectives.hpp).
#pragma once

#include "common/status.hpp"
#include "training/collectives/collectives.hpp"
#include "training/config.hpp"
#include "training/data.hpp"
#include "training/model.hpp"
#include "training/preemption.hpp"
#include "training/stragglers.hpp"
#include "training/worker_identity.hpp"

namespace dpl::training {

// Never stops for a preemption (a run that writes no checkpoints: Note [Preemption]).
inline Result<bool> NeverPreempted(int64_t /*global_step*/) {
  return false;
}

// Runs the whole training job for this rank on `data` (OpenTrainingData), every collective
// through `collectives` (the attempt's front, which outlives the call); the model plugin is
// loaded but no instance exists yet; `local` names the machine's workers (one by default).
// Returns when training is done or failed, or (Ok) once `preemption` said to stop at a step
// boundary and that step's checkpoint is written (Note [Preemption] in preemption.cpp).
// `step_times` (none: not compared) takes every step's compute time of this rank and brings rank
// 0 every rank's (Note [Stragglers] in stragglers.hpp).
Status RunTraining(const TrainingConfig& config, const WorkerIdentity& identity,
                   const ModelPlugin& model_plugin, TrainingData data, Collectives& collectives,
                   const LocalGroup& local = {}, PreemptionCheck preemption = NeverPreempted,
                   StepTimeSharing* step_times = nullptr);

}  // namespace dpl::training
