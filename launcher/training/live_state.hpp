// Note [Shrink in place]: when a machine of an elastic job is lost (or one joins), the survivors'
// workers are not restarted and nothing is read from disk. Each worker's front is aborted (the
// collective under way returns), its training ends with the failure, and the worker copies its
// state of the last committed step into memory (CheckpointPolicy::CaptureLive): a step is
// committed on a rank once its update is applied, and with the whole optimizer state on every
// rank the update runs no collective, so an abort never leaves a rank's state half updated. The
// worker then waits for its launcher to name the next attempt (the launchers agree on its
// machines as for a restart), connects a new backend for it and starts training again in the same
// process: the model instance is made anew, and the state comes from the live rank that holds the
// newest step (the lowest such rank), broadcast over the new backend (ChooseLiveSource,
// HandOverState). Ranks can differ by one step (one finished its allreduce, another did not);
// taking the newest loses no step any rank committed, and the broadcast makes every replica the
// same bits. A new machine's workers have no live state and receive it the same way (a join from
// a live peer). With no live state anywhere (the first attempt, or a restart) a run starts from
// --resume's checkpoint as before. With --shard-optimizer each rank keeps its part and a copy of
// another machine's (Note [A copy of each part] in part_copy.hpp), and every part comes from a
// rank that holds it (live_parts.hpp); without the copies, the run continues from the newest
// checkpoint; with the shared-memory sums across machines every machine holds each part, and a
// snapshot of its part (PartSnapshot) is all a rank keeps. Several workers a machine that sum
// through its shared memory attach to it again (Note [A machine's shared memory over a regroup]
// in collectives/local_reduce.cpp), each with values of its own (ReduceInPlace in reducer.cpp).
#pragma once

#include <optional>

#include "common/status.hpp"
#include "training/checkpoint.hpp"
#include "training/checkpoint_policy.hpp"
#include "training/collectives/collectives.hpp"
#include "training/live_parts.hpp"
#include "training/model.hpp"
#include "training/step_parts.hpp"
#include "training/step_plan.hpp"

namespace dpl::training {

// What a rank keeps of its run after a failure: its state of the committed step, whole, or (the
// sharded optimizer's, with copies) all but the optimizer's state, which is in `parts`.
struct LiveState {
  CheckpointState state;
  std::optional<KeptParts> parts;
};

// Every rank says whether it holds a live state, of which step and which parts: what every rank
// takes from whom (the source is the lowest rank of those with the newest step; -1 when none
// holds one, or when a part of the sharded optimizer's state is held by no rank left, said by
// rank 0, when the run continues from the newest checkpoint).
Result<LivePlan> ChooseLiveSource(Collectives& collectives, const std::optional<LiveState>& live);

// `source`'s state to every rank: on `source`, `state` is its live state; on every other rank a
// capture of its own model (the same layout, its values overwritten). The sizes are checked
// first.
Status HandOverState(Collectives& collectives, int source, CheckpointState* state);

// The parts of a run a live state is taken from and put into.
struct LiveRun {
  Collectives& collectives;
  CheckpointPolicy& checkpoints;
  Model& model;
  StepParts& step;
  int64_t bucket_cap_bytes;  // how the sharded optimizer's parts were cut
};

// After the run failed: this rank's state of `committed` into *live, unless the state is not whole
// here and no copy of the parts is kept (the sharded optimizer's without --shard-copy, or one
// copy of the values for a machine's workers). The front is aborted first, so no collective still
// queued runs into what is torn down next.
void KeepLiveStateOf(const LiveRun& run, const TrainingPosition& committed,
                     std::optional<LiveState>* live);

// The live state `plan` names to every rank of the run and into its model, placement and
// optimizer; its position. On failure, the source keeps its live state for the next attempt.
// Rank 0 says where the run continues.
Result<TrainingPosition> TakeLiveState(const LiveRun& run, int rank, const LivePlan& plan,
                                       std::optional<LiveState>* live);

// The bytes of the tensors a state holds (for messages).
uint64_t StateBytes(const CheckpointState& state);

}  // namespace dpl::training
