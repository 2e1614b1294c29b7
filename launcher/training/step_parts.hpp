// The three parts of a training step (docs/architecture.md, "How one step's data flows"): where
// the parameters live (placement.hpp), how their gradients are summed over the ranks
// (reducer.hpp) and what runs the optimizer (optimizer_runner.hpp). Chosen together, once, from
// the model's memory, what the front reaches (collectives/collectives.hpp) and the options; the
// trainer calls them in turn and asks none of them which kind it got.
#pragma once

#include <memory>

#include "common/status.hpp"
#include "training/collectives/collectives.hpp"
#include "training/config.hpp"
#include "training/model.hpp"
#include "training/optimizer_runner.hpp"
#include "training/placement.hpp"
#include "training/reducer.hpp"
#include "training/step_plan.hpp"
#include "training/thread_pool.hpp"

namespace dpl::training {

// Where the optimizer runs.
enum class OptimizerPlace { kHostMemory, kModel };

struct StepParts {
  std::unique_ptr<ParameterPlacement> placement;
  std::unique_ptr<GradientReducer> reducer;
  OptimizerPlace optimizer_place = OptimizerPlace::kHostMemory;
  // AddOptimizer's: the worker's threads the optimizer runs on, and the runner.
  std::unique_ptr<ThreadPool> threads;
  std::unique_ptr<OptimizerRunner> optimizer;
};

// The placement of `model`'s parameters and the reducer of their gradients through
// `collectives`; rank 0 says what was chosen where it is not what the flags suggest.
Result<StepParts> PlaceParameters(Model& model, Collectives& collectives,
                                  const PlacementSettings& settings);
// What a rank of the sharded optimizer keeps for a regroup in place: a snapshot of its part in a
// run that keeps its state live over a change of machines, and (Note [A copy of each part] in
// part_copy.hpp) a copy of another machine's part where --shard-copy asks for one (auto: in such
// a run) and not every machine holds each part; `ranks_per_machine` ranks a machine.
PartKeeping PartKeepingOf(const TrainingConfig& config, const StepParts& parts,
                          int ranks_per_machine, bool keeps_live_state);
// The optimizer runner of `parts`, over the steps of `plan`, on `threads` threads of the worker;
// sharded, keeping what `keeping` says.
Status AddOptimizer(const TrainingConfig& config, const StepPlan& plan, Model& model, int rank,
                    int threads, StepParts* parts, PartKeeping keeping = {});

}  // namespace dpl::training
