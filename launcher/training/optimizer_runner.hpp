// The optimizer runner of a run, one of the three parts of a step (step_parts.hpp): what one
// optimizer step does with the averaged gradients: fp16's loss scaling (unscale, and skip the step
// on inf/NaN), --clip-grad-norm, the scheduled learning rate, then the optimizer, in host memory
// (HostOptimizerRunner, optimizer.hpp) or on the model's device (DeviceOptimizerRunner). Its
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
// Note [Device optimizer placement]: where the model runs the optimizer where its parameters are
// (ModelCapability::kDeviceOptimizer, model ABI v4's apply_update; the placement leaves the values
// on the device), the device runner only decides: it asks the model for the gradients' statistics
// when fp16 or clipping needs them, folds the averaging factor, the unscale and the clip
// coefficient into one gradient factor, and hands the model the step number and the scheduled
// rate. The checkpoint reads and writes the model's optimizer state by state index, in the host
// optimizer's layout and names, so a run resumes with either placement.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "training/config.hpp"
#include "training/loss_scaler.hpp"
#include "training/lr_schedule.hpp"
#include "training/model.hpp"
#include "training/optimizer.hpp"
#include "training/part_copy.hpp"
#include "training/placement.hpp"
#include "training/step_plan.hpp"
#include "training/thread_pool.hpp"
#include "training/update_share.hpp"

namespace dpl::training {

// What every optimizer step decides, wherever the optimizer runs: the scheduled rate, fp16's loss
// scale and whether the step is skipped, and the count of skipped steps.
class StepRules {
 public:
  // The schedule over the steps of `plan` (Note [The schedule spans the run]), a loss scaler when
  // config.precision is fp16; rank 0 logs the skipped steps.
  static Result<StepRules> Create(const TrainingConfig& config, const StepPlan& plan, int rank);

  // The rate of optimizer step `global_step` + 1.
  Status FollowSchedule(int64_t global_step);
  // The schedule advances, on a skipped step too, as torch's loop calls scheduler.step().
  void Advance() { schedule_.Advance(); }
  // The loss scale into the model when it changed (fp16).
  Status TellModel(Model& model);
  // The loss scaler's decision on a step whose gradients are non-finite on some rank or not (fp16;
  // kApply otherwise), logged when skipped.
  StepDecision Decide(bool non_finite, int64_t global_step);

  double learning_rate() const { return learning_rate_; }
  // fp16 only.
  const std::optional<LossScaler>& scaler() const { return scaler_; }
  std::optional<LossScalingState> loss_scaling() const;
  Status RestoreLossScaling(const LossScalingState& state);
  void LogSummary(int64_t global_step) const;

 private:
  StepRules(LrSchedule schedule, std::optional<LossScaler> scaler, int rank)
      : schedule_(std::move(schedule)),
        scaler_(std::move(scaler)),
        learning_rate_(schedule_.learning_rate()),
        rank_(rank) {}

  LrSchedule schedule_;
  std::optional<LossScaler> scaler_;
  double learning_rate_;
  int rank_;
  int64_t skipped_steps_ = 0;
  float model_loss_scale_ = 1.0f;  // what the model was last told (1 after create)
};

// One run of this rank's shard of the optimizer's state: state[k] is state k (StateNames) of the
// run's elements, not copied.
struct ShardRun {
  ParameterRun run;
  std::vector<const std::vector<float>*> state;
};

class OptimizerRunner {
 public:
  virtual ~OptimizerRunner() = default;

  // Before each batch, `global_step` optimizer steps done: the coming step's learning rate, and
  // the loss scale into the model when it changed (fp16).
  Status BeforeBatch(int64_t global_step, Model& model) {
    DPL_RETURN_IF_ERROR(FollowSchedule(global_step));
    return rules_.TellModel(model);
  }
  // Optimizer step `global_step` + 1 on the averaged gradients, which still need `factor` (the
  // reducer's Finish): unscaled and checked (fp16), clipped, then applied, or skipped when they
  // hold inf or NaN. The gradients are left changed; the reducer zeroes them.
  virtual Result<StepDecision> Step(int64_t global_step, float factor) = 0;

  // torch.optim's names of the optimizer's per-parameter state, in its order.
  std::vector<std::string> StateNames() const { return StateNamesOf(kind_); }
  // Optimizer steps applied (a checkpoint's count).
  virtual int64_t optimizer_steps() const = 0;
  virtual void set_optimizer_steps(int64_t steps) = 0;
  // The optimizer's state whole: (*state)[k][p] is state k (StateNames) of parameter p (of
  // `sizes[p]` elements). Where it is sharded every rank must call it (the parts are gathered)
  // and only those with `whole` get every part; the others get an empty list.
  virtual Status WholeState(const std::vector<size_t>& sizes, bool whole,
                            OptimizerState* state) = 0;
  // Takes this rank's runs of `state` (laid out as WholeState's).
  virtual Status RestoreState(const OptimizerState& state) = 0;
  // Whether this rank keeps the optimizer's state of its part only (--shard-optimizer), and that
  // shard run by run (a checkpoint folder's part, Note [Checkpoint forms] in
  // checkpoint_folder.hpp); none where the state is whole.
  virtual bool sharded() const { return false; }
  virtual std::vector<ShardRun> Shard() const { return {}; }
  // Which part of the sharded state this rank holds (UpdateShare::part); 0 where it is whole.
  virtual int part() const { return 0; }
  // After a failure, where this rank also keeps a copy of another rank's part (Note [A copy of
  // each part] in part_copy.hpp): both parts at the committed step `committed_step`, and one
  // step on where they were updated; none otherwise.
  virtual std::optional<KeptParts> KeepParts(int64_t /*committed_step*/) { return std::nullopt; }

  // The rate of the step the current batch belongs to (set by BeforeBatch).
  double learning_rate() const { return rules_.learning_rate(); }
  bool scales_loss() const { return rules_.scaler().has_value(); }
  std::optional<LossScalingState> loss_scaling() const { return rules_.loss_scaling(); }
  // From a checkpoint (fp16 only; refused with what is wrong when the state does not fit).
  Status RestoreLossScaling(const LossScalingState& state) {
    return rules_.RestoreLossScaling(state);
  }
  // Rank 0 logs how many steps were skipped in all (fp16); a no-op otherwise.
  void LogSummary(int64_t global_step) const { rules_.LogSummary(global_step); }

 protected:
  OptimizerRunner(const TrainingConfig& config, StepRules rules)
      : rules_(std::move(rules)),
        kind_(config.optimizer.kind),
        clip_grad_norm_(config.clip_grad_norm) {}
  // The rate of optimizer step `global_step` + 1, into the optimizer.
  Status FollowSchedule(int64_t global_step) {
    DPL_RETURN_IF_ERROR(rules_.FollowSchedule(global_step));
    UseRate(rules_.learning_rate());
    return Status::Ok();
  }
  virtual void UseRate(double /*learning_rate*/) {}

  StepRules rules_;
  OptimizerKind kind_;
  double clip_grad_norm_;
};

// The tensors of `parameters` as the optimizer sees them, each with whether it is decayed (Note
// [Weight decay groups]); rank 0 logs which are.
std::vector<OptimizedTensor> OptimizedTensors(const TrainingConfig& config,
                                              const std::vector<HostParameter>& parameters,
                                              int rank);

// The host's optimizer (optimizer.hpp) on the runs of `share` (every parameter whole, or this
// rank's part with --shard-optimizer) of `parameters` (their values are not read), on `pool`'s
// threads (NULL: none), with `config`'s options and the steps of `plan`; sharded, keeping what
// `keeping` says for a regroup in place. Rank 0 logs which tensors are decayed and, sharded, the
// state it keeps.
Result<std::unique_ptr<OptimizerRunner>> HostOptimizerRunner(
    const TrainingConfig& config, const std::vector<HostParameter>& parameters, UpdateShare& share,
    const StepPlan& plan, int rank, ThreadPool* pool, PartKeeping keeping = {});
// The model's own optimizer, where its parameters are (Note [Device optimizer placement]).
Result<std::unique_ptr<OptimizerRunner>> DeviceOptimizerRunner(
    const TrainingConfig& config, const std::vector<HostParameter>& parameters, Model& model,
    const StepPlan& plan, int rank);

}  // namespace dpl::training
