#include "training/loss_scaler.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "training/number_text.hpp"

namespace dpl::training {
namespace {

// An exponent of all ones is inf or NaN. Testing bits rather than std::isfinite keeps the loops
// free of calls and branches, so the compiler vectorises them.
constexpr uint32_t kExponentMask = 0x7f800000u;

inline uint32_t NonFiniteBit(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return uint32_t((bits & kExponentMask) == kExponentMask);
}

}  // namespace

LossScaler::LossScaler(const LossScalerOptions& options)
    : options_(options), scale_(float(options.init_scale)) {}

Result<LossScaler> LossScaler::Create(const LossScalerOptions& options) {
  const float init_scale = float(options.init_scale);
  if (!(init_scale > 0.0f && std::isfinite(init_scale)))
    return Status::InvalidArgument(
        "--loss-scale-init must be a positive number within float32 range (got " +
        NumberText(options.init_scale) + ")");
  if (!(options.growth_factor > 1.0 && std::isfinite(options.growth_factor)))
    return Status::InvalidArgument(
        "--loss-scale-growth-factor must be a finite number greater than 1 (got " +
        NumberText(options.growth_factor) + ")");
  if (!(options.backoff_factor > 0.0 && options.backoff_factor < 1.0))
    return Status::InvalidArgument(
        "--loss-scale-backoff-factor must be greater than 0 and less than 1 (got " +
        NumberText(options.backoff_factor) + ")");
  if (options.growth_interval < 1 || options.growth_interval > std::numeric_limits<int32_t>::max())
    return Status::InvalidArgument("--loss-scale-growth-interval must be between 1 and " +
                                   std::to_string(std::numeric_limits<int32_t>::max()) +
                                   " optimizer steps (got " +
                                   std::to_string(options.growth_interval) + ")");
  return LossScaler(options);
}

bool LossScaler::FoundNonFinite(const std::vector<FloatSpan>& gradients) {
  uint32_t found = 0;
  for (const FloatSpan& gradient : gradients) {
    const float* values = gradient.data;
    for (size_t i = 0; i < gradient.size; ++i) found |= NonFiniteBit(values[i]);
  }
  return found != 0;
}

bool LossScaler::Unscale(const std::vector<FloatSpan>& gradients) const {
  const float inverse = inverse_scale();
  if (inverse == 1.0f) return FoundNonFinite(gradients);
  uint32_t found = 0;
  for (const FloatSpan& gradient : gradients) {
    float* __restrict values = gradient.data;
    for (size_t i = 0; i < gradient.size; ++i) {
      found |= NonFiniteBit(values[i]);
      values[i] = values[i] * inverse;
    }
  }
  return found != 0;
}

StepDecision LossScaler::Update(bool found_non_finite_on_any_rank) {
  if (found_non_finite_on_any_rank) {
    scale_ = float(double(scale_) * options_.backoff_factor);
    growth_tracker_ = 0;
    return StepDecision::kSkip;
  }
  const int32_t successful = growth_tracker_ + 1;
  if (successful == options_.growth_interval) {
    const float grown = float(double(scale_) * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    growth_tracker_ = successful;
  }
  return StepDecision::kApply;
}

Status LossScaler::Restore(const LossScalerState& state) {
  if (!(state.scale > 0.0f && std::isfinite(state.scale)))
    return Status::InvalidArgument("the checkpoint's loss scale " + NumberText(state.scale) +
                                   " is not a positive finite number");
  if (state.growth_tracker < 0 || state.growth_tracker >= options_.growth_interval)
    return Status::InvalidArgument("the checkpoint's loss-scale growth tracker " +
                                   std::to_string(state.growth_tracker) + " is outside [0, " +
                                   std::to_string(options_.growth_interval) +
                                   "), the range for --loss-scale-growth-interval " +
                                   std::to_string(options_.growth_interval));
  scale_ = state.scale;
  growth_tracker_ = state.growth_tracker;
  return Status::Ok();
}

}  // namespace dpl::training
