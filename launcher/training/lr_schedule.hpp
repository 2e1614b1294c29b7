// Learning-rate schedules (--lr-schedule, --warmup-steps, --lr-step-size, --lr-gamma), value for
// value those of torch.optim.lr_scheduler in torch 1.13: the same double arithmetic, including
// the recurrences torch uses instead of closed forms (Note [Recursive schedules]).
//
// A schedule is stepped once per optimizer step (not per batch and not per epoch), over the run's
// known number of optimizer steps N, those it takes to its end (Note [The schedule spans the run]).
// learning_rate() is the rate of the next optimizer step; the optimizer receives it as torch's
// does param_group['lr'] (Optimizer::set_learning_rate).
//
// With W = --warmup-steps and M = N - W, each schedule is, in torch terms, on an optimizer whose
// lr is the base rate:
//   main = constant: LambdaLR(lr_lambda=lambda step: 1.0)
//          step:     StepLR(step_size=--lr-step-size, gamma=--lr-gamma)
//          cosine:   CosineAnnealingLR(T_max=M, eta_min=0)
//          linear:   LinearLR(start_factor=1.0, end_factor=0.0, total_iters=M): a linear decay
//                    from the base rate to 0 at the end of the run
//   W = 0: main alone.
//   W > 0: SequentialLR([LinearLR(start_factor=1.0/(W+1), end_factor=1.0, total_iters=W), main],
//          milestones=[W]): optimizer step s < W runs at about base*(s+1)/(W+1), step W and the
//          following ones follow main from its start (exactly the base rate at step W).
// Closed forms for optimizer step s (torch's values differ from these in the last bits):
//   step: base*gamma^floor((s-W)/step_size); cosine: base*(1+cos(pi*(s-W)/M))/2;
//   linear: base*(M-(s-W))/M.
#pragma once

#include <cstdint>

#include "common/status.hpp"
#include "training/config.hpp"

namespace dpl::training {

// The schedule's state is its step counter: Restore(k) replays the first k steps, so a resumed
// schedule gives the same bits as one that never stopped. Checkpoint step(), which counts every
// optimizer step taken or skipped (a step skipped for a non-finite gradient advances the schedule,
// as torch's loop calls scheduler.step() either way), not Optimizer::steps().
class LrSchedule {
 public:
  // A schedule over `total_steps` optimizer steps, starting at step 0. The errors name the flag:
  // a step schedule without --lr-step-size, a warmup that leaves no step.
  static Result<LrSchedule> Create(const LrScheduleOptions& options, double base_learning_rate,
                                   int64_t total_steps);

  // The learning rate of the next optimizer step.
  double learning_rate() const { return learning_rate_; }
  // Optimizer steps done (Advance calls since step 0).
  int64_t step() const { return step_; }
  // Moves to the next optimizer step: call after each optimizer step, taken or skipped.
  void Advance();
  // Puts the schedule at `step` steps done, as if Advance had been called that many times from
  // the start. Refused (naming the step) when `step` is negative or beyond the run's steps.
  Status Restore(int64_t step);

 private:
  LrSchedule(const LrScheduleOptions& options, double base_learning_rate, int64_t total_steps);
  double WarmupRate(int64_t epoch) const;
  double MainRate(int64_t epoch) const;

  LrScheduleKind kind_;
  int64_t warmup_steps_, step_size_, total_steps_, main_steps_;
  double gamma_, base_learning_rate_, warmup_start_factor_;
  int64_t step_ = 0;
  double learning_rate_;  // torch's param_group['lr'] after `step_` scheduler steps
};

}  // namespace dpl::training
