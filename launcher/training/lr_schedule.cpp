#include "training/lr_schedule.hpp"

#include <cmath>

#include "training/number_text.hpp"

namespace dpl::training {
namespace {

constexpr double kPi = 3.141592653589793;  // Python's math.pi
constexpr double kEtaMin = 0.0;            // CosineAnnealingLR's default

}  // namespace

// Note [Recursive schedules]: torch 1.13's schedulers compute each rate from the previous one
// (the "chainable form" get_lr: LinearLR multiplies by 1 + (end-start)/(total*start + (epoch-1)*
// (end-start)), CosineAnnealingLR by a ratio of two cosines, StepLR by gamma every step_size
// epochs), and only use the closed forms when stepped with an explicit epoch, which SequentialLR
// does at its milestone (scheduler.step(0)). The recurrence and the closed form differ in the last
// bits after a few steps, so this file repeats torch's recurrences operation for operation in
// double (Python floats, libm's cos as math.cos). Epoch 0 of a main schedule, reached either at
// construction (no warmup) or through step(0) at the milestone, is exactly the base rate in every
// case (x * 1.0, (base - 0) * 2 / 2, base * gamma**0).

LrSchedule::LrSchedule(const LrScheduleOptions& options, double base_learning_rate,
                       int64_t total_steps)
    : kind_(options.kind),
      warmup_steps_(options.warmup_steps),
      step_size_(options.step_size),
      total_steps_(total_steps),
      main_steps_(total_steps - options.warmup_steps),
      gamma_(options.gamma),
      base_learning_rate_(base_learning_rate),
      warmup_start_factor_(1.0 / double(options.warmup_steps + 1)) {
  learning_rate_ =
      warmup_steps_ > 0 ? base_learning_rate_ * warmup_start_factor_ : base_learning_rate_;
}

Result<LrSchedule> LrSchedule::Create(const LrScheduleOptions& options, double base_learning_rate,
                                      int64_t total_steps) {
  const LrScheduleKind kind = options.kind;
  if (options.warmup_steps < 0)
    return Status::InvalidArgument("--warmup-steps must be at least 0 (got " +
                                   std::to_string(options.warmup_steps) + ")");
  if (kind == LrScheduleKind::kStep && options.step_size < 1)
    return Status::InvalidArgument(
        "--lr-schedule step needs --lr-step-size, the optimizer steps between decays, of at "
        "least 1 (got " +
        std::to_string(options.step_size) + ")");
  if (kind == LrScheduleKind::kStep && !(options.gamma > 0.0 && std::isfinite(options.gamma)))
    return Status::InvalidArgument("--lr-gamma must be a finite number greater than 0 (got " +
                                   NumberText(options.gamma) + ")");
  const bool decays = kind == LrScheduleKind::kCosine || kind == LrScheduleKind::kLinear;
  if ((options.warmup_steps > 0 || decays) && total_steps <= options.warmup_steps)
    return Status::InvalidArgument(
        std::string("--lr-schedule ") + NameOf(LrScheduleNames(), kind) + " with --warmup-steps " +
        std::to_string(options.warmup_steps) + " needs more optimizer steps than the run's " +
        std::to_string(total_steps) +
        (options.steps_from_max_steps ? " (--max-steps); use fewer warmup steps or a larger "
                                        "--max-steps"
                                      : "; use fewer warmup steps, or more epochs or data"));
  return LrSchedule(options, base_learning_rate, total_steps);
}

// LinearLR(start_factor, end_factor=1.0, total_iters=W).get_lr at 1 <= epoch < W.
double LrSchedule::WarmupRate(int64_t epoch) const {
  const double start = warmup_start_factor_, end = 1.0;
  return learning_rate_ * (1.0 + (end - start) / (double(warmup_steps_) * start +
                                                  double(epoch - 1) * (end - start)));
}

// The main schedule's get_lr at epoch >= 1 (Note [Recursive schedules]).
double LrSchedule::MainRate(int64_t epoch) const {
  switch (kind_) {
    case LrScheduleKind::kConstant:  // LambdaLR: base_lr * lr_lambda(epoch)
      return base_learning_rate_ * 1.0;
    case LrScheduleKind::kStep:
      return epoch % step_size_ != 0 ? learning_rate_ : learning_rate_ * gamma_;
    case LrScheduleKind::kCosine: {
      const double t_max = double(main_steps_);
      // Python's % is a floor modulo; for a test against 0 a truncating one answers the same.
      if ((epoch - 1 - main_steps_) % (2 * main_steps_) == 0)
        return learning_rate_ + (base_learning_rate_ - kEtaMin) * (1.0 - std::cos(kPi / t_max)) / 2;
      return (1.0 + std::cos(kPi * double(epoch) / t_max)) /
                 (1.0 + std::cos(kPi * double(epoch - 1) / t_max)) * (learning_rate_ - kEtaMin) +
             kEtaMin;
    }
    case LrScheduleKind::kLinear: {
      const double start = 1.0, end = 0.0;
      if (epoch > main_steps_) return learning_rate_;
      return learning_rate_ * (1.0 + (end - start) / (double(main_steps_) * start +
                                                      double(epoch - 1) * (end - start)));
    }
  }
  return learning_rate_;
}

void LrSchedule::Advance() {
  ++step_;
  if (step_ < warmup_steps_) {
    learning_rate_ = WarmupRate(step_);
  } else if (step_ == warmup_steps_) {
    learning_rate_ = base_learning_rate_;  // SequentialLR's step(0) of the main schedule
  } else {
    learning_rate_ = MainRate(step_ - warmup_steps_);
  }
}

Status LrSchedule::Restore(int64_t step) {
  if (step < 0 || step > total_steps_)
    return Status::InvalidArgument("cannot resume the learning-rate schedule at optimizer step " +
                                   std::to_string(step) + ": the run has " +
                                   std::to_string(total_steps_) + " optimizer steps");
  *this = LrSchedule(LrScheduleOptions{kind_, warmup_steps_, step_size_, gamma_, false},
                     base_learning_rate_, total_steps_);
  while (step_ < step) Advance();
  return Status::Ok();
}

}  // namespace dpl::training
