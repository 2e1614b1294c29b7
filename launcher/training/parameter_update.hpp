// What one optimizer step does with the averaged gradients: fp16's loss scaling (unscale, and skip
// the step on inf/NaN), --clip-grad-norm, the scheduled learning rate, then the optimizer. Its
// order is that of a PyTorch AMP loop:
//     scaler.scale(loss).backward()          # the model, with the scale set_loss_scale gave it
//     scaler.unscale_(optimizer)             # here, on the gradients averaged across ranks
//     clip_grad_norm_(params, max_norm)      # here, only when the step is taken
//     scaler.step(optimizer)                 # skipped when a gradient is inf or NaN
//     scaler.update(); scheduler.step()      # the schedule advances on skipped steps too
//
// Note [Same skip decision on every rank]: the inf/NaN check runs on the averaged gradients,
// which every rank holds bit for bit (the collective hands each rank the same sum, which is also
// what keeps the replicas identical), so every rank decides the same without another collective.
// A non-finite value on any one rank reaches every rank: inf plus a finite number is inf, inf
// minus inf and NaN plus anything are NaN, in float32 and in the 16-bit formats the backends
// sum in float32; a finite value that overflows the 16-bit wire format becomes inf there, and an
// overflow of the sum itself is the same overflow everywhere.
//
// Note [The schedule spans the run]: the learning rate of optimizer step s is the schedule's value
// after s steps, over the optimizer steps the run takes (StepPlan::RunSteps: --max-steps when it
// ends the run before its epochs do, else every epoch's steps), as transformers' schedulers span
// max_steps: a step budget anneals to its end. The rate follows from the global step and the
// run's length alone, so a run resumed with the same flags continues the straight run's rates
// exactly, with nothing of the schedule in the checkpoint; one resumed with another --max-steps
// continues from its step on the curve of its own length.
//
// Note [Device optimizer placement]: where the view names a device model (UpdateView::
// device_model), the model runs the optimizer where its parameters are (model ABI v4's
// apply_update) and this class only decides: it asks the model for the gradients' statistics when
// fp16 or clipping needs them, folds the averaging factor, the unscale and the clip coefficient
// into one gradient factor, and hands the model the step number and the scheduled rate. The
// checkpoint reads and writes the model's optimizer state by state index, in the host optimizer's
// layout and names, so a run resumes with either placement.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.hpp"
#include "training/config.hpp"
#include "training/loss_scaler.hpp"
#include "training/lr_schedule.hpp"
#include "training/model.hpp"
#include "training/optimizer.hpp"
#include "training/placement.hpp"
#include "training/step_plan.hpp"
#include "training/thread_pool.hpp"

namespace dpl::training {

// The loss scaler's state in a checkpoint, with the number of steps it skipped.
struct LossScalingState {
  LossScalerState scaler;
  int64_t skipped_steps = 0;
};

class ParameterUpdate {
 public:
  // The optimizer for the runs of `view` (every parameter whole, or this rank's part with
  // --shard-optimizer) of `parameters` (their values are not read), on `pool`'s threads (NULL:
  // none), weight decay on the tensors Note [Weight decay groups] says, the schedule over the
  // steps of `plan` (Note [The schedule spans the run]), a loss scaler when config.precision is
  // fp16. Rank 0 logs which tensors are decayed and the skipped steps.
  static Result<std::unique_ptr<ParameterUpdate>> Create(
      const TrainingConfig& config, const std::vector<HostParameter>& parameters,
      const UpdateView& view, const StepPlan& plan, int rank, ThreadPool* pool);

  // Before each batch, `global_step` optimizer steps done: the coming step's learning rate into
  // the optimizer, and the loss scale into the model when it changed (fp16).
  Status BeforeBatch(int64_t global_step, Model& model);
  // Optimizer step `global_step` + 1 on the averaged gradients of `view`'s runs (host memory):
  // unscaled and checked (fp16), clipped, then applied, or skipped when they hold inf or NaN.
  // With a sharded view the overflow flags and the norm's partial sums are shared with the other
  // ranks (Note [Sharded optimizer]). The gradients are left changed; the caller zeroes them.
  Result<StepDecision> Step(int64_t global_step, const UpdateView& view);

  // torch.optim's names of the optimizer's per-parameter state, in its order.
  std::vector<std::string> StateNames() const { return StateNamesOf(kind_); }
  // Optimizer steps applied (a checkpoint's count).
  int64_t optimizer_steps() const { return optimizer_ ? optimizer_->steps() : device_steps_; }
  void set_optimizer_steps(int64_t steps);
  // The optimizer's state whole: (*state)[k][p] is state k (Optimizer::StateNames) of parameter p
  // (of `sizes[p]` elements). With a sharded `view` every rank must call it (the parts are
  // gathered) and only those with `whole` get every part; the others get an empty list.
  Status WholeState(const UpdateView& view, const std::vector<size_t>& sizes, bool whole,
                    OptimizerState* state);
  // Takes this rank's runs of `state` (laid out as WholeState's).
  Status RestoreState(const UpdateView& view, const OptimizerState& state);
  // The rate of the step the current batch belongs to (set by BeforeBatch).
  double learning_rate() const { return learning_rate_; }
  bool scales_loss() const { return scaler_.has_value(); }
  // fp16 only.
  std::optional<LossScalingState> loss_scaling() const;
  // From a checkpoint (fp16 only; refused with what is wrong when the state does not fit).
  Status RestoreLossScaling(const LossScalingState& state);
  // Rank 0 logs how many steps were skipped in all (fp16); a no-op otherwise.
  void LogSummary(int64_t global_step) const;

 private:
  ParameterUpdate(const TrainingConfig& config, std::unique_ptr<Optimizer> optimizer,
                  LrSchedule schedule, std::optional<LossScaler> scaler, int rank,
                  ThreadPool* pool);
  Status FollowSchedule(int64_t global_step);
  // The loss scaler's decision on a step whose gradients are non-finite on some rank or not (fp16;
  // kApply otherwise), logged when skipped.
  StepDecision Decide(bool non_finite, int64_t global_step);
  // Step on a device model's own optimizer (Note [Device optimizer placement]).
  Result<StepDecision> DeviceStep(int64_t global_step, const UpdateView& view);
  Status DeviceState(const std::vector<size_t>& sizes, bool whole, OptimizerState* state);
  Status RestoreDeviceState(const OptimizerState& state);
  // How many state tensors the device model holds: SGD without momentum keeps none (zeros in a
  // checkpoint, as the host's buffers stay).
  size_t DeviceStateCount() const;
  // Unscales the runs' gradients (fp16) and shares the global quantities of a sharded view; true
  // when a gradient of any rank is inf or NaN. Fills `piece_sums` when clipping.
  Result<bool> CheckGradients(const UpdateView& view, std::vector<double>* piece_sums);
  Status Clip(const UpdateView& view, const std::vector<double>& piece_sums);

  double clip_grad_norm_;
  OptimizerKind kind_;
  double momentum_;
  std::unique_ptr<Optimizer> optimizer_;  // NULL with a device model
  Model* device_model_ = nullptr;         // Note [Device optimizer placement]
  int64_t device_steps_ = 0;
  double learning_rate_;
  LrSchedule schedule_;
  std::optional<LossScaler> scaler_;
  int rank_;
  ThreadPool* pool_;
  int64_t skipped_steps_ = 0;
  float model_loss_scale_ = 1.0f;  // what the model was last told (1 after create)
};

}  // namespace dpl::training
