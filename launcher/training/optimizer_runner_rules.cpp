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
  const std::string optimizer = NameOf(OptimizerNames(), config.optimizer);
  const std::string head = "--weight-decay " + NumberText(config.weight_decay) + " (" + optimizer +
                           (config.optimizer == OptimizerKind::kAdamW ? ", decoupled" : ", L2") +
                           ") on ";
  if (config.optimizer != OptimizerKind::kAdamW || config.decay_all) {
    log::Info(head + "every tensor: " + Count(decayed, "tensor", "tensors") + ", " +
              Count(decayed_elements, "element", "elements") +
              (config.optimizer == OptimizerKind::kAdamW ? " (--decay-all)" : ""));
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
  LrScheduleOptions schedule_options;
  schedule_options.kind = config.lr_schedule;
  schedule_options.warmup_steps = config.warmup_steps;
  schedule_options.step_size = config.lr_step_size;
  schedule_options.gamma = config.lr_gamma;
  schedule_options.steps_from_max_steps = plan.RunSteps() < plan.EpochSteps();
  DPL_ASSIGN_OR_RETURN(LrSchedule schedule,
                       LrSchedule::Create(schedule_options, config.learning_rate, plan.RunSteps()));
  std::optional<LossScaler> scaler;
  if (config.precision == Precision::kFp16) {
    LossScalerOptions scaler_options;
    scaler_options.init_scale = config.loss_scale_init;
    scaler_options.growth_factor = config.loss_scale_growth_factor;
    scaler_options.backoff_factor = config.loss_scale_backoff_factor;
    scaler_options.growth_interval = config.loss_scale_growth_interval;
    DPL_ASSIGN_OR_RETURN(scaler, LossScaler::Create(scaler_options));
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
    tensors.push_back(
        {p.elements, DecaysTensor(config.optimizer, config.decay_all, p.model_value.ndim)});
  }
  if (rank == 0 && config.weight_decay > 0.0) LogWeightDecay(config, parameters, tensors);
  return tensors;
}

}  // namespace dpl::training
