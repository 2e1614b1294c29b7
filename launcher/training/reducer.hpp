// How a step's gradients are summed over the ranks: the reducer of a run, one of the three parts
// of a step (step_parts.hpp), over the placement's gradients and the front's reduction of them
// (collectives/collectives.hpp).
#pragma once

#include <memory>

#include "common/status.hpp"
#include "training/collectives/collectives.hpp"
#include "training/gradient_sync.hpp"
#include "training/model.hpp"
#include "training/placement.hpp"
#include "training/step_profile.hpp"
#include "training/update_share.hpp"

namespace dpl::training {

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;

  // Before the train_step that ends an optimizer step: its gradients may start to be summed.
  virtual void BeginStep(float scale) = 0;
  // After that train_step, whose status is `step` (the communication is drained even when it
  // failed): the gradients summed over the ranks, where the optimizer reads them (the placement's
  // TakeGradients). Returns the factor the sums still need: 1, or where the gradients stay on the
  // model's device `scale`, the average's, for the model's update to apply.
  virtual Result<float> Finish(const Status& step, float scale, StepProfile* profile) = 0;
  // After the optimizer step: every rank's updated part to every rank (the sharded optimizer).
  Status PublishParts(StepProfile* profile) { return share().PublishParts(profile); }
  // Then the model's gradients zeroed for the next step, unless the reduction left them zero.
  virtual Status ResetGradients(StepProfile* profile) = 0;

  // What this rank's optimizer updates and scales, and what it shares (update_share.hpp).
  virtual UpdateShare& share() = 0;
  // Whether the workers of this machine compute with one copy of the parameters (Note [Shared
  // parameters] in placement.hpp).
  virtual bool SharesValues() const { return false; }
  // After the initial values are broadcast and a checkpoint restored: where the workers of a
  // machine share one copy of the values, none trains until all have written theirs.
  virtual Status SettleSharedValues() { return Status::Ok(); }
  // Stops the model from calling back into the reduction.
  virtual Status Detach() { return Status::Ok(); }
};

// One rank alone: nothing to sum; the placement scales what backward left.
std::unique_ptr<GradientReducer> LocalGradients(Model& model, ParameterPlacement& placement);

// The buckets of the placement's gradients summed through `collectives` as backward reports them
// ready: a CPU model's own memory (`in_place`; the machine's shared memory may take its values
// and gradients over, Note [Shared parameters]) or a device model's tensors (summed unscaled).
// `sharded`: the optimizer updates this rank's part only. Rank 0 says how they are summed.
Result<std::unique_ptr<GradientReducer>> ReduceInPlace(Model& model, InPlacePlacement& placement,
                                                       Collectives& collectives,
                                                       const PlacementSettings& settings);
Result<std::unique_ptr<GradientReducer>> ReduceOnModel(Model& model, ParameterPlacement& placement,
                                                       Collectives& collectives,
                                                       const PlacementSettings& settings);
// The host copy summed after backward (the backend cannot reach the model's memory).
Result<std::unique_ptr<GradientReducer>> ReduceHostCopy(Model& model, HostSumsPlacement& placement,
                                                        Collectives& collectives,
                                                        const PlacementSettings& settings);

}  // namespace dpl::training
