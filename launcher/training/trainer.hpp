// The data-parallel training loop run by each worker process (docs/recipe.md): sharded
// sampling, per-rank batch = global batch / world size, parameters broadcast from rank 0,
// gradients averaged through the backend in buckets overlapping backward, identical optimizer
// steps on every rank, rank-0 reporting, checkpoints, evaluation. The loop itself is short; a step
// is its three parts in turn (step_parts.hpp: the placement, the reducer, the optimizer runner),
// and around it are the reporter (reporter.hpp), the checkpoint policy (checkpoint_policy.hpp) and
// the evaluation (evaluation.hpp). Every collective goes through the attempt's front
// (collectives/collectives.hpp).
#pragma once

#include <optional>

#include "common/status.hpp"
#include "training/checkpoint.hpp"
#include "training/collectives/collectives.hpp"
#include "training/config.hpp"
#include "training/data.hpp"
#include "training/model.hpp"
#include "training/preemption.hpp"
#include "training/stragglers.hpp"
#include "training/worker_identity.hpp"

namespace dpl::training {

struct LiveState;  // live_state.hpp

// Never stops for a preemption (a run that writes no checkpoints: Note [Preemption]).
inline Result<bool> NeverPreempted(int64_t /*global_step*/) {
  return false;
}

// What a run is given besides its data and front: when to stop for a preemption (Note
// [Preemption] in preemption.cpp); `step_times` (none: not compared), which takes every step's
// compute time of this rank and brings rank 0 every rank's (Note [Stragglers] in stragglers.hpp);
// and `live_state` (none: a run that neither keeps nor takes one), Note [Shrink in place] in
// live_state.hpp: on entry, this rank's state from a run before it in this process, if any (the
// run starts from the newest live state of any rank, else as --resume says); after a failure,
// this rank's state of its last committed step, where the run has one whole.
struct TrainingHooks {
  PreemptionCheck preemption = NeverPreempted;
  StepTimeSharing* step_times = nullptr;
  std::optional<LiveState>* live_state = nullptr;
};

// Runs the whole training job for this rank on `data` (OpenTrainingData), every collective
// through `collectives` (the attempt's front, which outlives the call); the model plugin is
// loaded but no instance exists yet; `local` names the machine's workers (one by default).
// Returns when training is done or failed, or (Ok) once the preemption check said to stop at a
// step boundary and that step's checkpoint is written.
Status RunTraining(const TrainingConfig& config, const WorkerIdentity& identity,
                   const ModelPlugin& model_plugin, TrainingData& data, Collectives& collectives,
                   const LocalGroup& local = {}, TrainingHooks hooks = {});

}  // namespace dpl::training
