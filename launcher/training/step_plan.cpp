#include "training/step_plan.hpp"

#include <algorithm>

namespace dpl::training {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) {
  return a <= 0 ? 0 : (a + b - 1) / b;
}

}  // namespace

StepPlan::StepPlan(const TrainingConfig& config, int64_t batches_per_epoch, TrainingPosition start)
    : epochs_(std::max(0, config.epochs)),
      grad_accum_(std::max(1, config.grad_accum)),
      max_steps_(std::max<int64_t>(0, config.max_steps)),
      batches_per_epoch_(std::max<int64_t>(0, batches_per_epoch)),
      start_(start) {
  total_steps_ = start_.epoch < epochs_ ? StepsBefore(epochs_) : start_.global_step;
  end_epoch_ = std::max(start_.epoch, epochs_);
  if (max_steps_ == 0) return;
  total_steps_ = std::min(total_steps_, std::max(max_steps_, start_.global_step));
  if (start_.global_step >= max_steps_) {
    end_epoch_ = start_.epoch;  // resumed at or past its last step: nothing to train
  } else if (start_.epoch < epochs_) {
    // The epoch whose steps reach --max-steps is the last one the run enters.
    const int64_t after_first_epoch = max_steps_ - StepsBefore(start_.epoch + 1);
    const int64_t steps_per_epoch = StepsPerEpoch();
    if (after_first_epoch <= 0) {
      end_epoch_ = start_.epoch + 1;
    } else if (steps_per_epoch > 0) {
      const int64_t more_epochs = CeilDiv(after_first_epoch, steps_per_epoch);
      end_epoch_ = std::min(epochs_, start_.epoch + 1 + more_epochs);
    }
  }
}

int64_t StepPlan::BatchesPerEpoch(int64_t samples_per_rank, int64_t local_batch) {
  return local_batch > 0 ? CeilDiv(samples_per_rank, local_batch) : 0;
}

int64_t StepPlan::StepsPerEpoch() const {
  return CeilDiv(batches_per_epoch_, grad_accum_);
}

int64_t StepPlan::EpochSteps() const {
  return epochs_ * StepsPerEpoch();
}

int64_t StepPlan::RunSteps() const {
  return max_steps_ > 0 ? std::min(max_steps_, EpochSteps()) : EpochSteps();
}

int64_t StepPlan::FirstBatch(int64_t epoch) const {
  return epoch == start_.epoch ? start_.step_in_epoch : 0;
}

int64_t StepPlan::StepsIn(int64_t epoch) const {
  return CeilDiv(batches_per_epoch_ - FirstBatch(epoch), grad_accum_);
}

int64_t StepPlan::StepsBefore(int64_t epoch) const {
  if (epoch <= start_.epoch) return start_.global_step;
  return start_.global_step + StepsIn(start_.epoch) + (epoch - start_.epoch - 1) * StepsPerEpoch();
}

int64_t StepPlan::EndBatch(int64_t epoch) const {
  if (max_steps_ == 0) return batches_per_epoch_;
  const int64_t steps_left = std::max<int64_t>(0, max_steps_ - StepsBefore(epoch));
  if (steps_left >= StepsIn(epoch)) return batches_per_epoch_;
  return FirstBatch(epoch) + steps_left * grad_accum_;
}

bool StepPlan::IsOptimizerStep(int64_t epoch, int64_t batch) const {
  return MicroBatchesSoFar(epoch, batch) == grad_accum_ || batch + 1 == batches_per_epoch_;
}

int64_t StepPlan::MicroBatchesSoFar(int64_t epoch, int64_t batch) const {
  return (batch - FirstBatch(epoch)) % grad_accum_ + 1;
}

TrainingPosition StepPlan::EndPosition() const {
  if (end_epoch_ == start_.epoch) {
    // Nothing trained: a run resumed at its last step keeps its position exactly.
    if (max_steps_ > 0 && start_.global_step >= max_steps_) return start_;
    return {start_.epoch, 0, start_.global_step};
  }
  const int64_t last_epoch = end_epoch_ - 1;
  const int64_t end_batch = EndBatch(last_epoch);
  if (end_batch < batches_per_epoch_) return {last_epoch, end_batch, total_steps_};
  return {end_epoch_, 0, total_steps_};
}

}  // namespace dpl::training
