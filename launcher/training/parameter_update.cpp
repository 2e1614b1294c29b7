#include "training/parameter_update.hpp"

#include "common/log.hpp"
#include "training/gradient_clipping.hpp"
#include "training/number_text.hpp"

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

ParameterUpdate::ParameterUpdate(const TrainingConfig& config, std::unique_ptr<Optimizer> optimizer,
                                 LrSchedule schedule, std::optional<LossScaler> scaler, int rank)
    : clip_grad_norm_(config.clip_grad_norm),
      optimizer_(std::move(optimizer)),
      schedule_(std::move(schedule)),
      scaler_(std::move(scaler)),
      rank_(rank) {
  optimizer_->set_learning_rate(schedule_.learning_rate());
}

Result<std::unique_ptr<ParameterUpdate>> ParameterUpdate::Create(
    const TrainingConfig& config, const std::vector<HostParameter>& parameters,
    const StepPlan& plan, int rank) {
  OptimizerOptions optimizer_options;
  optimizer_options.kind = config.optimizer;
  optimizer_options.learning_rate = config.learning_rate;
  optimizer_options.momentum = config.momentum;
  optimizer_options.adam_beta1 = config.adam_beta1;
  optimizer_options.adam_beta2 = config.adam_beta2;
  optimizer_options.adam_eps = config.adam_eps;
  optimizer_options.weight_decay = config.weight_decay;
  std::vector<OptimizedTensor> tensors;
  for (const HostParameter& p : parameters) {
    tensors.push_back(
        {p.elements, DecaysTensor(config.optimizer, config.decay_all, p.model_value.ndim)});
  }
  if (rank == 0 && config.weight_decay > 0.0) LogWeightDecay(config, parameters, tensors);
  Result<std::unique_ptr<Optimizer>> optimizer =
      CreateOptimizer(optimizer_options, std::move(tensors));
  if (!optimizer.ok()) return optimizer.status();

  LrScheduleOptions schedule_options;
  schedule_options.kind = config.lr_schedule;
  schedule_options.warmup_steps = config.warmup_steps;
  schedule_options.step_size = config.lr_step_size;
  schedule_options.gamma = config.lr_gamma;
  schedule_options.steps_from_max_steps = plan.RunSteps() < plan.EpochSteps();
  Result<LrSchedule> schedule =
      LrSchedule::Create(schedule_options, config.learning_rate, plan.RunSteps());
  if (!schedule.ok()) return schedule.status();

  std::optional<LossScaler> scaler;
  if (config.precision == Precision::kFp16) {
    LossScalerOptions scaler_options;
    scaler_options.init_scale = config.loss_scale_init;
    scaler_options.growth_factor = config.loss_scale_growth_factor;
    scaler_options.backoff_factor = config.loss_scale_backoff_factor;
    scaler_options.growth_interval = config.loss_scale_growth_interval;
    Result<LossScaler> created = LossScaler::Create(scaler_options);
    if (!created.ok()) return created.status();
    scaler = *created;
  }
  return std::unique_ptr<ParameterUpdate>(new ParameterUpdate(
      config, std::move(*optimizer), std::move(*schedule), std::move(scaler), rank));
}

Status ParameterUpdate::FollowSchedule(int64_t global_step) {
  if (schedule_.step() != global_step) DPL_RETURN_IF_ERROR(schedule_.Restore(global_step));
  optimizer_->set_learning_rate(schedule_.learning_rate());
  return Status::Ok();
}

Status ParameterUpdate::BeforeBatch(int64_t global_step, Model& model) {
  DPL_RETURN_IF_ERROR(FollowSchedule(global_step));
  if (!scaler_ || scaler_->scale() == model_loss_scale_) return Status::Ok();
  DPL_RETURN_IF_ERROR(model.SetLossScale(scaler_->scale()));
  model_loss_scale_ = scaler_->scale();
  return Status::Ok();
}

Result<StepDecision> ParameterUpdate::Step(int64_t global_step,
                                           const std::vector<HostParameter>& parameters) {
  DPL_RETURN_IF_ERROR(FollowSchedule(global_step));
  std::vector<FloatSpan> gradients;
  gradients.reserve(parameters.size());
  for (const HostParameter& p : parameters) gradients.push_back({p.gradient, p.elements});
  StepDecision decision = StepDecision::kApply;
  if (scaler_) {
    const float scale = scaler_->scale();
    const bool non_finite = scaler_->Unscale(gradients);  // Note [Same skip decision on every rank]
    decision = scaler_->Update(non_finite);
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
  }
  if (decision == StepDecision::kApply) {
    if (clip_grad_norm_ > 0.0) ClipGradNorm(gradients, clip_grad_norm_);
    std::vector<float*> values;
    std::vector<const float*> sums;
    values.reserve(parameters.size());
    sums.reserve(parameters.size());
    for (const HostParameter& p : parameters) {
      values.push_back(p.value);
      sums.push_back(p.gradient);
    }
    optimizer_->Step(values, sums);
  }
  schedule_.Advance();  // on a skipped step too, as torch's loop calls scheduler.step() either way
  return decision;
}

std::optional<LossScalingState> ParameterUpdate::loss_scaling() const {
  if (!scaler_) return std::nullopt;
  return LossScalingState{scaler_->state(), skipped_steps_};
}

Status ParameterUpdate::RestoreLossScaling(const LossScalingState& state) {
  if (!scaler_) return Status::Ok();
  if (state.skipped_steps < 0) {
    return Status::InvalidArgument("the checkpoint's count of skipped steps " +
                                   std::to_string(state.skipped_steps) + " is negative");
  }
  DPL_RETURN_IF_ERROR(scaler_->Restore(state.scaler));
  skipped_steps_ = state.skipped_steps;
  return Status::Ok();
}

void ParameterUpdate::LogSummary(int64_t global_step) const {
  if (!scaler_ || rank_ != 0) return;
  log::Info("fp16 loss scaling: " + Steps(skipped_steps_) + " of " + std::to_string(global_step) +
            " skipped for inf/NaN gradients; the loss scale is " + NumberText(scaler_->scale()));
}

}  // namespace dpl::training
