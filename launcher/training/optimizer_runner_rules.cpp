// What every optimizer runner shares: the schedule, fp16's loss scaling and its decisions, and the
// weight decay groups.
#include "common/log.hpp"
#include "training/number_text.hpp"
#include "training/optimizer_runner.hpp"

namespace dpl::training {
namespace {

std::string Steps(int64_t count) {
  return std::to_string(count) + (count == 1 ? " step" : " steps");
}

std::string Count(size_t count, const char* one, const char* many) {
  return std::to_string(count) + " " + (count == 1 ? one : many);
}

// Note [Weight decay groups], said once: which tensors are decayed, and how many elements.
void LogWeightDecay(const TrainingConfig& config, const std::vector<HostParameter>& parameters,
                    const std::vector<OptimizedTensor>& tensors) {
  size_t decayed = 0, kept = 0, decayed_elements = 0, kept_elements = 0;
  for (const OptimizedTensor& tensor : tensors) {
    (tensor.decayed ? decayed : kept) += 1;
    (tensor.decayed ? decayed_elements : kept_elements) += tensor.elements;
  }
  const std::string optimizer = NameOf(OptimizerNames(), config.optimizer.kind);
  const std::string head =
      "--weight-decay " + NumberText(config.optimizer.weight_decay) + " (" + optimizer +
      (config.optimizer.kind == OptimizerKind::kAdamW ? ", decoupled" : ", L2") + ") on ";
  if (config.optimizer.kind != OptimizerKind::kAdamW || config.optimizer.decay_all) {
    log::Info(head + "every tensor: " + Count(decayed, "tensor", "tensors") + ", " +
              Count(decayed_elements, "element", "elements") +
              (config.optimizer.kind == OptimizerKind::kAdamW ? " (--decay-all)" : ""));
    return;
  }
  std::string examples;
  for (size_t i = 0, shown = 0; i < tensors.size() && shown < 3; ++i) {
    if (tensors[i].decayed) continue;
    examples += (shown++ ? ", " : " (") + parameters[i].name;
  }
  if (!examples.empty()) examples += kept > 3 ? ", ...)" : ")";
  log::Info(head + Count(decayed, "tensor", "tensors") + " of two or more dimensions (" +
            Count(decayed_elements, "element", "elements") + "); none on " +
            Count(kept, "bias or norm weight", "biases and norm weights") + examples + " (" +
            Count(kept_elements, "element", "elements") + "); --decay-all decays every tensor");
}

}  // namespace

Result<StepRules> StepRules::Create(const TrainingConfig& config, const StepPlan& plan, int rank) {
  LrScheduleOptions schedule_options = config.lr_schedule;
  schedule_options.steps_from_max_steps = plan.RunSteps() < plan.EpochSteps();
  DPL_ASSIGN_OR_RETURN(
      LrSchedule schedule,
      LrSchedule::Create(schedule_options, config.optimizer.learning_rate, plan.RunSteps()));
  std::optional<LossScaler> scaler;
  if (config.precision == Precision::kFp16) {
    DPL_ASSIGN_OR_RETURN(scaler, LossScaler::Create(config.loss_scaling));
  }
  return StepRules(std::move(schedule), std::move(scaler), rank);
}

Status StepRules::FollowSchedule(int64_t global_step) {
  if (schedule_.step() != global_step) DPL_RETURN_IF_ERROR(schedule_.Restore(global_step));
  learning_rate_ = schedule_.learning_rate();
  return Status::Ok();
}

Status StepRules::TellModel(Model& model) {
  if (!scaler_ || scaler_->scale() == model_loss_scale_) return Status::Ok();
  DPL_RETURN_IF_ERROR(model.SetLossScale(scaler_->scale()));
  model_loss_scale_ = scaler_->scale();
  return Status::Ok();
}

StepDecision StepRules::Decide(bool non_finite, int64_t global_step) {
  if (!scaler_) return StepDecision::kApply;
  const float scale = scaler_->scale();
  const StepDecision decision = scaler_->Update(non_finite);
  if (decision == StepDecision::kSkip) {
    ++skipped_steps_;
    if (rank_ == 0) {
      log::Warning("step " + std::to_string(global_step + 1) +
                   ": the fp16 gradients hold inf or NaN at loss scale " + NumberText(scale) +
                   "; the optimizer step is skipped and the loss scale is now " +
                   NumberText(scaler_->scale()) + " (" + Steps(skipped_steps_) +
                   " skipped so far)");
    }
  }
  return decision;
}

std::optional<LossScalingState> StepRules::loss_scaling() const {
  if (!scaler_) return std::nullopt;
  return LossScalingState{scaler_->state(), skipped_steps_};
}

Status StepRules::RestoreLossScaling(const LossScalingState& state) {
  if (!scaler_) return Status::Ok();
  if (state.skipped_steps < 0) {
    return Status::InvalidArgument("the checkpoint's count of skipped steps " +
                                   std::to_string(state.skipped_steps) + " is negative");
  }
  DPL_RETURN_IF_ERROR(scaler_->Restore(state.scaler));
  skipped_steps_ = state.skipped_steps;
  return Status::Ok();
}

void StepRules::LogSummary(int64_t global_step) const {
  if (!scaler_ || rank_ != 0) return;
  log::Info("fp16 loss scaling: " + Steps(skipped_steps_) + " of " + std::to_string(global_step) +
            " skipped for inf/NaN gradients; the loss scale is " + NumberText(scaler_->scale()));
}

std::vector<OptimizedTensor> OptimizedTensors(const TrainingConfig& config,
                                              const std::vector<HostParameter>& parameters,
                                              int rank) {
  std::vector<OptimizedTensor> tensors;  // a parameter's decay is its runs'
  for (const HostParameter& p : parameters) {
    tensors.push_back({p.elements, DecaysTensor(config.optimizer.kind, config.optimizer.decay_all,
                                                p.model_value.ndim)});
  }
  if (rank == 0 && config.optimizer.weight_decay > 0.0) LogWeightDecay(config, parameters, tensors);
  return tensors;
}

}  // namespace dpl::training
