// When a run writes checkpoints and how it resumes from one: every --checkpoint-every steps and
// at the end (rank 0 writes, into --checkpoint-dir), and with --resume from the newest, which
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
// the temporaries of steps up to the new one, which a killed writer left (one rank writes, in step
// order, so none of them is still being written). Files of later steps, another run's in a
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
  // checkpoint that has one; it outlives the policy.
  CheckpointPolicy(const TrainingConfig& config, int rank, ValidationState& validation);

  // With --resume, restores the newest checkpoint into the host values (the placement hands them
  // to the model), the model's buffers and random state, the optimizer and the loss scaler, and
  // returns its position; else, or when there is none yet, the start.
  Result<TrainingPosition> Resume(Model& model, ParameterPlacement& placement,
                                  OptimizerRunner& optimizer) const;
  // Whether a checkpoint is due after the optimizer step that made `global_step` steps.
  bool DueAfter(int64_t global_step) const;
  // Writes one (on rank 0, when --checkpoint-dir is set; a no-op elsewhere), then removes what
  // Note [Checkpoint retention] says (a failure to remove is a warning).
  Status Save(const TrainingPosition& position, Model& model, ParameterPlacement& placement,
              OptimizerRunner& optimizer) const;

 private:
  // The checkpoint of `position`, with `whole`, the optimizer's state as WholeState gathers it.
  Result<CheckpointState> Capture(const TrainingPosition& position, Model& model,
                                  const ParameterPlacement& placement, OptimizerRunner& optimizer,
                                  const OptimizerState& whole) const;

  const TrainingConfig& config_;
  int rank_;
  ValidationState& validation_;
};

}  // namespace dpl::training
