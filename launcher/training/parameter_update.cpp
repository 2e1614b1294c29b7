#include "training/parameter_update.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/log.hpp"
#include "training/gradient_clipping.hpp"
#include "training/number_text.hpp"
#include "training/shard.hpp"

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

// Rank 0 says how much of the optimizer's state it keeps (Note [Sharded optimizer]).
void LogStateShare(const UpdateView& view, Optimizer& optimizer) {
  size_t owned = 0, bytes = 0;
  for (const UpdateRun& run : view.runs) owned += run.elements;
  for (const std::vector<float>* buffer : optimizer.StateBuffers()) {
    bytes += buffer->size() * sizeof(float);
  }
  log::Info("the optimizer's state on rank 0: " + std::to_string(owned) + " parameters' worth, " +
            log::Bytes(uint64_t(bytes)) + " (its part)");
}

// Pieces a thread sums at least.
constexpr size_t kPiecesPerThread = 16;

std::vector<FloatSpan> GradientsOf(const std::vector<UpdateRun>& runs) {
  std::vector<FloatSpan> gradients;
  gradients.reserve(runs.size());
  for (const UpdateRun& run : runs) gradients.push_back({run.gradient, run.elements});
  return gradients;
}

// The scaled runs' piece sums of squares into `sums` at their places (Note [Pieces]); the others
// stay.
void SumPieces(const UpdateView& view, ThreadPool* pool, std::vector<double>* sums) {
  std::vector<size_t> first;  // of each run's pieces among the runs', and their total last
  size_t total = 0;
  for (const UpdateRun& run : view.scaled) {
    first.push_back(total);
    total += PiecesOf(run.elements);
  }
  auto sum = [&](size_t begin, size_t end) {
    for (size_t r = 0; r < view.scaled.size(); ++r) {
      const UpdateRun& run = view.scaled[r];
      const size_t home = view.first_piece[run.parameter] + run.offset / kPieceElements;
      for (size_t k = 0; k < PiecesOf(run.elements); ++k) {
        if (first[r] + k < begin || first[r] + k >= end) continue;
        const size_t from = k * kPieceElements;
        PieceSumsOfSquares(run.gradient + from, std::min(kPieceElements, run.elements - from),
                           sums->data() + home + k);
      }
    }
  };
  if (pool == nullptr) return sum(0, total);
  pool->ParallelFor(total, kPiecesPerThread, sum);
}

// The device model's optimizer as the host's would run: per-parameter weight decay from the
// groups rule, every element its shard.
dpl_optimizer_config DeviceOptimizerConfig(const OptimizerOptions& options,
                                           const std::vector<OptimizedTensor>& tensors,
                                           std::vector<double>* weight_decay) {
  static constexpr std::pair<OptimizerKind, dpl_optimizer_kind> kKinds[] = {
      {OptimizerKind::kSgd, DPL_OPTIMIZER_SGD},
      {OptimizerKind::kAdam, DPL_OPTIMIZER_ADAM},
      {OptimizerKind::kAdamW, DPL_OPTIMIZER_ADAMW},
      {OptimizerKind::kAdadelta, DPL_OPTIMIZER_ADADELTA}};
  dpl_optimizer_config config{};
  config.struct_size = sizeof config;
  for (const auto& [kind, abi_kind] : kKinds) {
    if (kind == options.kind) config.kind = abi_kind;
  }
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

// The host's optimizer for `view`'s runs, or NULL after handing a device model its own (Note
// [Device optimizer placement]); `tensors` are every parameter's, whole.
Result<std::unique_ptr<Optimizer>> OptimizerFor(const OptimizerOptions& options,
                                                const std::vector<OptimizedTensor>& tensors,
                                                const UpdateView& view, int rank) {
  if (view.device_model != nullptr) {
    std::vector<double> weight_decay;
    DPL_RETURN_IF_ERROR(
        view.device_model->SetOptimizer(DeviceOptimizerConfig(options, tensors, &weight_decay)));
    return std::unique_ptr<Optimizer>();
  }
  std::vector<OptimizedTensor> runs;
  for (const UpdateRun& run : view.runs)
    runs.push_back({run.elements, tensors[run.parameter].decayed});
  Result<std::unique_ptr<Optimizer>> optimizer = CreateOptimizer(options, std::move(runs));
  if (optimizer.ok() && view.sharded() && rank == 0) LogStateShare(view, **optimizer);
  return optimizer;
}

}  // namespace

ParameterUpdate::ParameterUpdate(const TrainingConfig& config, std::unique_ptr<Optimizer> optimizer,
                                 LrSchedule schedule, std::optional<LossScaler> scaler, int rank,
                                 ThreadPool* pool)
    : clip_grad_norm_(config.clip_grad_norm),
      kind_(config.optimizer),
      momentum_(config.momentum),
      optimizer_(std::move(optimizer)),
      learning_rate_(schedule.learning_rate()),
      schedule_(std::move(schedule)),
      scaler_(std::move(scaler)),
      rank_(rank),
      pool_(pool) {
  if (!optimizer_) return;
  optimizer_->set_learning_rate(learning_rate_);
  optimizer_->set_threads(pool);
}

Result<std::unique_ptr<ParameterUpdate>> ParameterUpdate::Create(
    const TrainingConfig& config, const std::vector<HostParameter>& parameters,
    const UpdateView& view, const StepPlan& plan, int rank, ThreadPool* pool) {
  OptimizerOptions optimizer_options;
  optimizer_options.kind = config.optimizer;
  optimizer_options.learning_rate = config.learning_rate;
  optimizer_options.momentum = config.momentum;
  optimizer_options.adam_beta1 = config.adam_beta1;
  optimizer_options.adam_beta2 = config.adam_beta2;
  optimizer_options.adam_eps = config.adam_eps;
  optimizer_options.weight_decay = config.weight_decay;
  std::vector<OptimizedTensor> tensors;  // a parameter's decay is its runs'
  for (const HostParameter& p : parameters) {
    tensors.push_back(
        {p.elements, DecaysTensor(config.optimizer, config.decay_all, p.model_value.ndim)});
  }
  if (rank == 0 && config.weight_decay > 0.0) LogWeightDecay(config, parameters, tensors);
  DPL_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                       OptimizerFor(optimizer_options, tensors, view, rank));

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
  auto update = std::unique_ptr<ParameterUpdate>(new ParameterUpdate(
      config, std::move(optimizer), std::move(schedule), std::move(scaler), rank, pool));
  update->device_model_ = view.device_model;
  return update;
}

Status ParameterUpdate::FollowSchedule(int64_t global_step) {
  if (schedule_.step() != global_step) DPL_RETURN_IF_ERROR(schedule_.Restore(global_step));
  learning_rate_ = schedule_.learning_rate();
  if (optimizer_) optimizer_->set_learning_rate(learning_rate_);
  return Status::Ok();
}

Status ParameterUpdate::BeforeBatch(int64_t global_step, Model& model) {
  DPL_RETURN_IF_ERROR(FollowSchedule(global_step));
  if (!scaler_ || scaler_->scale() == model_loss_scale_) return Status::Ok();
  DPL_RETURN_IF_ERROR(model.SetLossScale(scaler_->scale()));
  model_loss_scale_ = scaler_->scale();
  return Status::Ok();
}

Result<bool> ParameterUpdate::CheckGradients(const UpdateView& view,
                                             std::vector<double>* piece_sums) {
  // Note [Same skip decision on every rank]: unshared, every rank checks the same gradients.
  const bool non_finite = scaler_ && scaler_->Unscale(GradientsOf(view.scaled));
  if (clip_grad_norm_ > 0.0) {
    piece_sums->assign(view.pieces, 0.0);
    SumPieces(view, pool_, piece_sums);
  }
  if (view.exchange == nullptr || (!scaler_ && clip_grad_norm_ <= 0.0)) return non_finite;
  // Each part's overflow flag, then the piece sums, added up over the ranks that share the parts.
  const size_t parts = size_t(view.exchange->layout().parts());
  std::vector<double> entries(parts, 0.0);
  entries[size_t(view.exchange->part())] = non_finite ? 1.0 : 0.0;
  entries.insert(entries.end(), piece_sums->begin(), piece_sums->end());
  DPL_RETURN_IF_ERROR(view.exchange->ShareEntries(&entries));
  std::copy(entries.begin() + std::ptrdiff_t(parts), entries.end(), piece_sums->begin());
  bool any = false;
  for (size_t part = 0; part < parts; ++part) any = any || entries[part] != 0.0;
  return any;
}

Status ParameterUpdate::Clip(const UpdateView& view, const std::vector<double>& piece_sums) {
  const float coefficient =
      ClipCoefficient(NormOfPieces(piece_sums, view.first_piece), clip_grad_norm_);
  if (coefficient == 1.0f) return Status::Ok();  // changes no bit (ClipGradNorm)
  for (const UpdateRun& run : view.scaled) {
    float* __restrict values = run.gradient;
    for (size_t i = 0; i < run.elements; ++i) values[i] *= coefficient;
  }
  // The same factor on every rank: all of them wait here, or none.
  if (!view.shared_gradients) return Status::Ok();
  return view.exchange->Barrier();
}

StepDecision ParameterUpdate::Decide(bool non_finite, int64_t global_step) {
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

Result<StepDecision> ParameterUpdate::Step(int64_t global_step, const UpdateView& view) {
  DPL_RETURN_IF_ERROR(FollowSchedule(global_step));
  if (device_model_ != nullptr) return DeviceStep(global_step, view);
  std::vector<double> piece_sums;
  DPL_ASSIGN_OR_RETURN(bool non_finite, CheckGradients(view, &piece_sums));
  const StepDecision decision = Decide(non_finite, global_step);
  if (decision == StepDecision::kApply) {
    if (clip_grad_norm_ > 0.0) DPL_RETURN_IF_ERROR(Clip(view, piece_sums));
    std::vector<float*> values;
    std::vector<const float*> sums;
    values.reserve(view.runs.size());
    sums.reserve(view.runs.size());
    for (const UpdateRun& run : view.runs) {
      values.push_back(run.value);
      sums.push_back(run.gradient);
    }
    optimizer_->Step(values, sums);
  }
  schedule_.Advance();  // on a skipped step too, as torch's loop calls scheduler.step() either way
  return decision;
}

// The factor is the product of those the host path applies one after the other (the average's,
// the unscale's, the clip's), so the two paths agree to float rounding.
Result<StepDecision> ParameterUpdate::DeviceStep(int64_t global_step, const UpdateView& view) {
  double factor = double(view.gradient_scale);
  if (scaler_) factor *= double(scaler_->inverse_scale());
  bool non_finite = false;
  double norm = 0.0;  // of the gradients times `factor`
  if (scaler_ || clip_grad_norm_ > 0.0) {
    dpl_gradient_statistics statistics{};
    DPL_RETURN_IF_ERROR(device_model_->GradientStatistics(&statistics));
    non_finite = statistics.all_finite == 0;
    norm = std::sqrt(statistics.squared_norm) * std::fabs(factor);
  }
  const StepDecision decision = Decide(non_finite, global_step);
  if (decision == StepDecision::kApply) {
    if (clip_grad_norm_ > 0.0) factor *= double(ClipCoefficient(float(norm), clip_grad_norm_));
    dpl_update update{};
    update.struct_size = sizeof update;
    update.step = device_steps_ + 1;
    update.learning_rate = learning_rate_;
    update.gradient_factor = factor;
    DPL_RETURN_IF_ERROR(device_model_->ApplyUpdate(update));
    ++device_steps_;
  }
  schedule_.Advance();
  return decision;
}

Status ParameterUpdate::WholeState(const UpdateView& view, const std::vector<size_t>& sizes,
                                   bool whole, OptimizerState* state) {
  if (device_model_ != nullptr) return DeviceState(sizes, whole, state);
  std::vector<std::vector<float>*> buffers = optimizer_->StateBuffers();
  const size_t runs = view.runs.size();
  const size_t names = optimizer_->StateNames().size();
  state->assign(whole ? names : 0, {});
  for (auto& parameters : *state) {
    for (size_t n : sizes) parameters.emplace_back(n, 0.0f);
  }
  for (size_t k = 0; k < state->size(); ++k) {
    for (size_t r = 0; r < runs; ++r) {
      const UpdateRun& run = view.runs[r];
      std::copy(buffers[k * runs + r]->begin(), buffers[k * runs + r]->end(),
                (*state)[k][run.parameter].begin() + std::ptrdiff_t(run.offset));
    }
  }
  if (!view.sharded()) return Status::Ok();
  // The step's gather of the parameters just before may still be read from the same copy.
  DPL_RETURN_IF_ERROR(view.exchange->Barrier());
  std::map<std::pair<uint32_t, size_t>, size_t> run_at;
  for (size_t r = 0; r < runs; ++r) run_at[{view.runs[r].parameter, view.runs[r].offset}] = r;
  for (size_t k = 0; k < names; ++k) {
    auto source = [&](const Segment& segment) -> const float* {
      return buffers[k * runs + run_at.at({segment.parameter, segment.offset})]->data();
    };
    auto destination = [&](const Segment& segment) -> float* {
      return whole ? (*state)[k][segment.parameter].data() + segment.offset : nullptr;
    };
    DPL_RETURN_IF_ERROR(view.exchange->GatherParts(source, destination, /*again=*/true)
                            .WithContext("gathering the optimizer's state"));
  }
  return Status::Ok();
}

Status ParameterUpdate::RestoreState(const UpdateView& view, const OptimizerState& state) {
  if (device_model_ != nullptr) return RestoreDeviceState(state);
  std::vector<std::vector<float>*> buffers = optimizer_->StateBuffers();
  const size_t runs = view.runs.size();
  for (size_t k = 0; k < state.size(); ++k) {
    for (size_t r = 0; r < runs; ++r) {
      const UpdateRun& run = view.runs[r];
      const float* from = state[k][run.parameter].data() + run.offset;
      std::copy(from, from + run.elements, buffers[k * runs + r]->begin());
    }
  }
  return Status::Ok();
}

void ParameterUpdate::set_optimizer_steps(int64_t steps) {
  if (optimizer_) optimizer_->set_steps(steps);
  device_steps_ = steps;
}

size_t ParameterUpdate::DeviceStateCount() const {
  return kind_ == OptimizerKind::kSgd && momentum_ == 0.0 ? 0 : StateNames().size();
}

Status ParameterUpdate::DeviceState(const std::vector<size_t>& sizes, bool whole,
                                    OptimizerState* state) {
  state->assign(whole ? StateNames().size() : 0, {});
  if (!whole) return Status::Ok();  // unsharded: nothing to gather from this rank
  size_t total = 0;
  for (size_t n : sizes) total += n;
  std::vector<float> flat(total, 0.0f);
  for (size_t k = 0; k < state->size(); ++k) {
    if (k < DeviceStateCount()) {
      const auto which = static_cast<dpl_model_tensors>(DPL_MODEL_TENSORS_OPTIMIZER_STATE + k);
      DPL_RETURN_IF_ERROR(device_model_->ReadTensors(which, flat.data(), flat.size()));
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

Status ParameterUpdate::RestoreDeviceState(const OptimizerState& state) {
  for (size_t k = 0; k < state.size() && k < DeviceStateCount(); ++k) {
    std::vector<float> flat;
    for (const std::vector<float>& parameter : state[k]) {
      flat.insert(flat.end(), parameter.begin(), parameter.end());
    }
    const auto which = static_cast<dpl_model_tensors>(DPL_MODEL_TENSORS_OPTIMIZER_STATE + k);
    DPL_RETURN_IF_ERROR(device_model_->WriteTensors(which, flat.data(), flat.size()));
  }
  return Status::Ok();
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
