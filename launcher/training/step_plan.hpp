// How a run's batches become optimizer steps, worked out once from --epochs, --grad-accum,
// --max-steps, the batches of an epoch and where the run starts: which batch ends an optimizer
// step, how many steps the run makes, which batches of each epoch it trains and where a run that
// ends continues from. The training loop, the reporter (totals, progress bar) and the parameter
// update (the schedule's length) all read it, so they cannot disagree.
//
// Note [Micro-batch groups]: with --grad-accum K an optimizer step sums the gradients of K
// batches, counted from the first batch the run trains in the epoch; the epoch's last batch ends
// a step too, so a shorter last group is a step of its own (torch's loop with `(i + 1) % K == 0 or
// i + 1 == len(loader)`). Steps never span epochs. A checkpoint is written after an optimizer
// step, so a resumed run starts at the start of a group and counts its groups as the straight run
// did.
//
// Note [Where a run ends]: --max-steps ends a run after that many optimizer steps in all (steps of
// the runs it resumes included), possibly inside an epoch; a run resumed at or past it trains
// nothing. The position a run ends at (and checkpoints) is that of its last step: inside the epoch
// when --max-steps ended it there, else the start of the next epoch.
#pragma once

#include <cstdint>

#include "training/config.hpp"

namespace dpl::training {

// Where training stands: the epoch to continue in, the batches of it already done, and the
// optimizer steps made in all.
struct TrainingPosition {
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  int64_t global_step = 0;
};

inline bool operator==(const TrainingPosition& a, const TrainingPosition& b) {
  return a.epoch == b.epoch && a.step_in_epoch == b.step_in_epoch && a.global_step == b.global_step;
}

class StepPlan {
 public:
  StepPlan() = default;
  // The plan of a run of `config` over epochs of `batches_per_epoch` batches a rank, from `start`
  // (a fresh run: the default position; a resumed one: its checkpoint's).
  StepPlan(const TrainingConfig& config, int64_t batches_per_epoch, TrainingPosition start = {});

  // The batches of an epoch for a rank that sees `samples_per_rank` samples in batches of
  // `local_batch` (the last one may be short).
  static int64_t BatchesPerEpoch(int64_t samples_per_rank, int64_t local_batch);

  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  const TrainingPosition& start() const { return start_; }
  // Optimizer steps of a whole epoch (Note [Micro-batch groups]).
  int64_t StepsPerEpoch() const;
  // The optimizer steps of every epoch from step 0, --max-steps not counted.
  int64_t EpochSteps() const;
  // The optimizer steps a run takes from step 0 to its end: EpochSteps(), or --max-steps when
  // fewer. The same for a run and for the runs that resume it with the same flags.
  int64_t RunSteps() const;
  // The optimizer steps done when the run ends, those before its start included.
  int64_t TotalSteps() const { return total_steps_; }

  // The epochs the run enters: [start().epoch, EndEpoch()).
  int64_t EndEpoch() const { return end_epoch_; }
  // The first batch of `epoch` the run trains: start().step_in_epoch in the start's epoch, else 0.
  int64_t FirstBatch(int64_t epoch) const;
  // One past the last batch of `epoch` the run trains: batches_per_epoch(), unless --max-steps
  // ends the run inside the epoch (Note [Where a run ends]).
  int64_t EndBatch(int64_t epoch) const;
  // Whether batch `batch` of `epoch` (counted from 0) ends an optimizer step.
  bool IsOptimizerStep(int64_t epoch, int64_t batch) const;
  // The micro-batches of the optimizer step `batch` of `epoch` belongs to, up to `batch` itself:
  // at the batch that ends a step, the step's number of micro-batches.
  int64_t MicroBatchesSoFar(int64_t epoch, int64_t batch) const;
  // Where training continues after this run (Note [Where a run ends]).
  TrainingPosition EndPosition() const;

 private:
  // Optimizer steps done when `epoch` (>= start().epoch) starts, had the run no --max-steps.
  int64_t StepsBefore(int64_t epoch) const;
  // Optimizer steps of batches [FirstBatch(epoch), batches_per_epoch()).
  int64_t StepsIn(int64_t epoch) const;

  int64_t epochs_ = 0;
  int64_t grad_accum_ = 1;
  int64_t max_steps_ = 0;  // 0: none
  int64_t batches_per_epoch_ = 0;
  TrainingPosition start_;
  int64_t total_steps_ = 0;
  int64_t end_epoch_ = 0;
};

}  // namespace dpl::training
