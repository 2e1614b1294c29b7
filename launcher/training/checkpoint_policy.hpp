// When a run writes checkpoints and how it resumes from one: every --checkpoint-every steps and
// at the end (rank 0 writes, into --checkpoint-dir; every rank its part with --shard-optimizer
// on: Note [Checkpoint forms] in checkpoint_folder.hpp), copied at the step boundary and written
// while training goes on (Note [Checkpoints that do not stop training] in checkpoint_writer.hpp),
// and with --resume from the newest, which
// must have been written with the options that change the arithmetic (TrainingConfig::
// resume_settings, from the flag table; named and compared one by one). A checkpoint holds the
// parameters and buffers by name, the optimizer's state by parameter name, the position in the data
// and the model's random state (checkpoint.hpp).
//
// Note [Checkpoint retention]: --keep-checkpoints K keeps the newest K. Rank 0 removes older
// ones only after the new checkpoint is complete on disk (written to a temporary, fsynced,
// renamed, the folder fsynced: WriteCheckpoint), so a crash or a kill at any moment leaves the
// newest complete checkpoints in place and resumable: the K before the new one while it is being
// written. It removes the complete checkpoints older than the new one but the newest K - 1, and
// the temporaries of steps up to the new one, which a killed writer left (one thread of rank 0
// writes the files, and commits the folders, in step order, so none of them is still being
// written). Files of later steps, another run's in a
// reused folder, are left alone. The default is 5, not "all" as torch.save loops and
// transformers' Trainer have it: a long run with --checkpoint-every fills the disk, and the
// write that fails then ends the run hours in; a resume or a restart needs the newest, and a few
// before it cover a newest that is not the one wanted (tf.train.Saver keeps 5 too). K = 0 keeps
// every checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.hpp"
#include "training/checkpoint.hpp"
#include "training/checkpoint_writer.hpp"
#include "training/config.hpp"
#include "training/evaluation.hpp"
#include "training/model.hpp"
#include "training/optimizer_runner.hpp"
#include "training/placement.hpp"
#include "training/step_plan.hpp"

namespace dpl::training {

class CheckpointPolicy {
 public:
  // Checkpoints carry `validation` (validation while training), and Resume restores it from a
  // checkpoint that has one; it outlives the policy. `training_samples`, the training set's size
  // (-1: not known), is recorded in each checkpoint and checked by Resume (Note [The training
  // set of a resumed run] in checkpoint_policy.cpp). `schedule_steps`, the optimizer steps the
  // learning-rate schedule spans (-1: not known), is recorded too where the schedule's curve
  // depends on it, and a resume that draws it anew is warned of (Note [A schedule drawn anew on
  // resume]).
  CheckpointPolicy(const TrainingConfig& config, int rank, int world_size,
                   ValidationState& validation, int64_t training_samples = -1,
                   int64_t schedule_steps = -1);

  // With --resume, restores the newest checkpoint into the host values (the placement hands them
  // to the model), the model's buffers and random state, the optimizer and the loss scaler, and
  // returns its position; else, or when there is none yet, the start. Rank 0 first removes the
  // unfinished folders of parts earlier runs left (RemoveStagingFolders).
  Result<TrainingPosition> Resume(Model& model, ParameterPlacement& placement,
                                  OptimizerRunner& optimizer);
  // Note [Shrink in place] (live_state.hpp): this rank's state at `position` copied into memory,
  // as a checkpoint would hold it, without a collective (for a sharded optimizer, whose state no
  // rank holds whole, without the optimizer's state); and such a state, from `source` (for
  // messages), restored as Resume restores a file's, returning its position.
  Result<CheckpointState> CaptureLive(const TrainingPosition& position, Model& model,
                                      ParameterPlacement& placement,
                                      OptimizerRunner& optimizer) const;
  Result<TrainingPosition> Apply(const CheckpointState& state, const std::string& source,
                                 Model& model, ParameterPlacement& placement,
                                 OptimizerRunner& optimizer);
  // Whether a checkpoint is due after the optimizer step that made `global_step` steps.
  bool DueAfter(int64_t global_step) const;
  // When --checkpoint-dir is set, on every rank at the same step: copies the state of
  // `position` and starts writing it (rank 0 the file; every rank its part of a folder), after
  // the write before is done; a failure of that write is returned here. Once written, rank 0
  // removes what Note [Checkpoint retention] says (a failure to remove is a warning). A step
  // already saved (the end of a run at a checkpoint's step) is not written again.
  Status Save(const TrainingPosition& position, Model& model, ParameterPlacement& placement,
              OptimizerRunner& optimizer);
  // Waits until the checkpoint being written is complete on disk (for a folder: every part and
  // the manifest, on rank 0; this rank's part elsewhere).
  Status Finish();
  // Whether this run writes folders of parts (Note [Checkpoint forms]), and where the checkpoint
  // of `step` goes.
  bool WritesParts(const OptimizerRunner& optimizer) const;
  std::string PathOf(int64_t step, const OptimizerRunner& optimizer) const;

 private:
  // The one file: the optimizer's state gathered to rank 0, which writes.
  Status SaveFile(const TrainingPosition& position, Model& model, ParameterPlacement& placement,
                  OptimizerRunner& optimizer);
  // A folder: every rank copies and writes its part; rank 0 also the rest, then commits.
  Status SaveParts(const TrainingPosition& position, Model& model, ParameterPlacement& placement,
                   OptimizerRunner& optimizer);
  // The checkpoint of `position`, with `whole`, the optimizer's state as WholeState gathers it
  // (empty for a folder's state.pt).
  Result<CheckpointState> Capture(const TrainingPosition& position, Model& model,
                                  const ParameterPlacement& placement, OptimizerRunner& optimizer,
                                  const OptimizerState& whole) const;
  // On the writer's thread, once the checkpoint of `step` is complete on disk (rank 0): the
  // retention, and the line that says where it is.
  void AfterWritten(int64_t step, const std::string& path, double pause_seconds,
                    double write_seconds) const;

  const TrainingConfig& config_;
  int rank_;
  int world_size_;
  ValidationState& validation_;
  int64_t training_samples_;
  int64_t schedule_steps_;   // -1 where the schedule's curve does not depend on the run's length
  int64_t saved_step_ = -1;  // the step of the last checkpoint written or resumed from
  CheckpointWriter writer_;  // last: its thread ends before the rest goes
};

// The optimizer's state whole (OptimizerRunner::WholeState's layout) as a checkpoint's entries:
// state `names[k]` of each of `parameters`, float32 in the parameter's shape.
std::vector<OptimizerStateTensor> OptimizerStateTensors(
    const std::vector<HostParameter>& parameters, const std::vector<std::string>& names,
    const OptimizerState& whole);

}  // namespace dpl::training
