// Dynamic loss scaling for fp16 gradients, with torch.cuda.amp.GradScaler's rules and defaults
// (torch 1.13): gradients computed from a loss multiplied by scale() are unscaled by the float32
// reciprocal of the scale; a step whose gradients hold inf or NaN on any rank is skipped and
// halves the scale; growth_interval clean steps in a row double it.
//
// Every rank must take the same decision, so finding and deciding are separate steps: each rank
// unscales its gradients and learns whether it saw a non-finite value (Unscale, or
// FoundNonFinite), the caller combines these host flags across ranks (any rank: skip), and every
// rank calls Update with the combined flag.
//
// One difference from torch 1.13: a growth that would overflow float32 to inf is not applied (the
// scale stays, the growth tracker restarts), as in torch 2.1 and later; 1.13 would step to an
// infinite scale and then skip every step.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.hpp"
#include "training/config.hpp"
#include "training/float_span.hpp"

namespace dpl::training {

// What a checkpoint keeps (GradScaler.state_dict's "scale" and "_growth_tracker").
struct LossScalerState {
  float scale = 0.0f;
  int32_t growth_tracker = 0;  // clean steps since the last growth or skip
};

// The loss scaler's state in a checkpoint, with the number of steps it skipped.
struct LossScalingState {
  LossScalerState scaler;
  int64_t skipped_steps = 0;
};

enum class StepDecision {
  kApply,  // the gradients are finite everywhere: take the optimizer step
  kSkip,   // some rank found inf or NaN: leave the parameters and optimizer state as they are
};

class LossScaler {
 public:
  // Refuses options GradScaler refuses (growth factor <= 1, backoff factor >= 1) and ones it
  // would run into nonsense with, naming the --loss-scale-* flag and the value.
  static Result<LossScaler> Create(const LossScalerOptions& options);

  // The factor for the loss (GradScaler.scale: the loss times this float32).
  float scale() const { return scale_; }
  // GradScaler.unscale_'s factor: the scale's reciprocal in double, rounded to float32.
  float inverse_scale() const { return float(1.0 / double(scale_)); }

  // Whether any value of any gradient is inf or NaN.
  static bool FoundNonFinite(const std::vector<FloatSpan>& gradients);
  // GradScaler.unscale_: multiplies every gradient value by inverse_scale() (not when that is 1)
  // and returns whether any value was inf or NaN before the multiplication (FoundNonFinite of the
  // scaled gradients, in the same pass).
  bool Unscale(const std::vector<FloatSpan>& gradients) const;

  // GradScaler.update with the flag combined across ranks: on inf/NaN the scale is multiplied by
  // backoff_factor and the tracker restarts (kSkip); otherwise the tracker counts the clean step
  // and on reaching growth_interval the scale is multiplied by growth_factor and the tracker
  // restarts (kApply). The products are taken in double and rounded to float32, as torch's
  // kernel does.
  StepDecision Update(bool found_non_finite_on_any_rank);

  LossScalerState state() const { return {scale_, growth_tracker_}; }
  // Continues from a checkpoint's state. Refused, naming the value, when the scale is not a
  // positive finite number or the tracker is outside [0, growth_interval).
  Status Restore(const LossScalerState& state);

 private:
  explicit LossScaler(const LossScalerOptions& options);

  LossScalerOptions options_;
  float scale_;
  int32_t growth_tracker_ = 0;
};

}  // namespace dpl::training
