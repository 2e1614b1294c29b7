// The model's own optimizer, where its parameters are (Note [Device optimizer placement] in
// optimizer_runner.hpp).
#include <cmath>

#include "training/gradient_clipping.hpp"
#include "training/optimizer_runner.hpp"

namespace dpl::training {
namespace {

// The device model's optimizer as the host's would run: per-parameter weight decay from the
// groups rule, every element its shard.
dpl_optimizer_config DeviceOptimizerConfig(const OptimizerOptions& options,
                                           const std::vector<OptimizedTensor>& tensors,
                                           std::vector<double>* weight_decay) {
  dpl_optimizer_config config{};
  config.struct_size = sizeof config;
  config.kind = *FindOptimizerType(options.kind)->on_device;  // PlaceParameters checked
  config.momentum = options.momentum;
  config.beta1 = options.adam_beta1;
  config.beta2 = options.adam_beta2;
  config.rho = options.rho;
  const bool adam = options.kind == OptimizerKind::kAdam || options.kind == OptimizerKind::kAdamW;
  config.eps = adam ? options.adam_eps : options.eps;
  weight_decay->clear();
  uint64_t total = 0;
  for (const OptimizedTensor& tensor : tensors) {
    weight_decay->push_back(tensor.decayed ? options.weight_decay : 0.0);
    total += tensor.elements;
  }
  config.weight_decay = weight_decay->data();
  config.shard_begin = 0;
  config.shard_end = total;
  return config;
}

class DeviceRunner final : public OptimizerRunner {
 public:
  DeviceRunner(const TrainingConfig& config, StepRules rules, Model& model)
      : OptimizerRunner(config, std::move(rules)),
        model_(model),
        momentum_(config.optimizer.momentum) {}

  Result<StepDecision> Step(int64_t global_step, float factor) override;
  int64_t optimizer_steps() const override { return steps_; }
  void set_optimizer_steps(int64_t steps) override { steps_ = steps; }
  Status WholeState(const std::vector<size_t>& sizes, bool whole, OptimizerState* state) override;
  Status RestoreState(const OptimizerState& state) override;

 private:
  // How many state tensors the device model holds: SGD without momentum keeps none (zeros in a
  // checkpoint, as the host's buffers stay).
  size_t StateCount() const {
    return kind_ == OptimizerKind::kSgd && momentum_ == 0.0 ? 0 : StateNames().size();
  }

  Model& model_;
  double momentum_;
  int64_t steps_ = 0;
};

// The factor is the product of those the host path applies one after the other (the average's,
// the unscale's, the clip's), so the two paths agree to float rounding.
Result<StepDecision> DeviceRunner::Step(int64_t global_step, float gradient_factor) {
  DPL_RETURN_IF_ERROR(FollowSchedule(global_step));
  const std::optional<LossScaler>& scaler = rules_.scaler();
  double factor = double(gradient_factor);
  if (scaler) factor *= double(scaler->inverse_scale());
  bool non_finite = false;
  double norm = 0.0;  // of the gradients times `factor`
  if (scaler || clip_grad_norm_ > 0.0) {
    dpl_gradient_statistics statistics{};
    DPL_RETURN_IF_ERROR(model_.GradientStatistics(&statistics));
    non_finite = statistics.all_finite == 0;
    norm = std::sqrt(statistics.squared_norm) * std::fabs(factor);
  }
  const StepDecision decision = rules_.Decide(non_finite, global_step);
  if (decision == StepDecision::kApply) {
    if (clip_grad_norm_ > 0.0) factor *= double(ClipCoefficient(float(norm), clip_grad_norm_));
    dpl_update update{};
    update.struct_size = sizeof update;
    update.step = steps_ + 1;
    update.learning_rate = rules_.learning_rate();
    update.gradient_factor = factor;
    DPL_RETURN_IF_ERROR(model_.ApplyUpdate(update));
    ++steps_;
  }
  rules_.Advance();
  return decision;
}

// Unsharded: rank 0 reads the model's state; the others have nothing to add.
Status DeviceRunner::WholeState(const std::vector<size_t>& sizes, bool whole,
                                OptimizerState* state) {
  state->assign(whole ? StateNames().size() : 0, {});
  if (!whole) return Status::Ok();
  size_t total = 0;
  for (size_t n : sizes) total += n;
  std::vector<float> flat(total, 0.0f);
  for (size_t k = 0; k < state->size(); ++k) {
    if (k < StateCount()) {
      const auto which = static_cast<dpl_model_tensors>(DPL_MODEL_TENSORS_OPTIMIZER_STATE + k);
      DPL_RETURN_IF_ERROR(model_.ReadTensors(which, flat.data(), flat.size()));
    }
    size_t offset = 0;
    for (size_t n : sizes) {
      (*state)[k].emplace_back(flat.begin() + std::ptrdiff_t(offset),
                               flat.begin() + std::ptrdiff_t(offset + n));
      offset += n;
    }
  }
  return Status::Ok();
}

Status DeviceRunner::RestoreState(const OptimizerState& state) {
  for (size_t k = 0; k < state.size() && k < StateCount(); ++k) {
    std::vector<float> flat;
    for (const std::vector<float>& parameter : state[k]) {
      flat.insert(flat.end(), parameter.begin(), parameter.end());
    }
    const auto which = static_cast<dpl_model_tensors>(DPL_MODEL_TENSORS_OPTIMIZER_STATE + k);
    DPL_RETURN_IF_ERROR(model_.WriteTensors(which, flat.data(), flat.size()));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<OptimizerRunner>> DeviceOptimizerRunner(
    const TrainingConfig& config, const std::vector<HostParameter>& parameters, Model& model,
    const StepPlan& plan, int rank) {
  const std::vector<OptimizedTensor> tensors = OptimizedTensors(config, parameters, rank);
  std::vector<double> weight_decay;
  DPL_RETURN_IF_ERROR(
      model.SetOptimizer(DeviceOptimizerConfig(config.optimizer, tensors, &weight_decay)));
  DPL_ASSIGN_OR_RETURN(StepRules rules, StepRules::Create(config, plan, rank));
  return std::unique_ptr<OptimizerRunner>(new DeviceRunner(config, std::move(rules), model));
}

}  // namespace dpl::training
