// Note [A copy of each part] (--shard-copy): with --shard-optimizer through the backend each rank
// holds the optimizer state of its part only, so a lost machine would take its ranks' parts with
// it. Each rank also keeps a copy of the part of the rank one machine on (its rank plus the
// ranks per machine, modulo the world: another machine's). Once the step's gradients are
// unscaled and clipped, the ranks gather the averaged gradients of every part (one allgather, as
// large as the gather of the updated values that follows), and each runs the optimizer on its
// copy as the owner runs it on the part: the same element-wise arithmetic on the same bits, so the
// copy stays the owner's bits. It also writes the copied part's updated values into its model,
// which the step's gather of the updated parts then writes again with the same bits.
//
// How a sharded step is committed: on a rank, once the gather of the updated parts is done (its
// values are then the step's, whole). Between its update and that, an abort can leave a rank with
// its parts one step on and the rest of its values half gathered. So before it updates, a rank
// copies its part's and its copy's values and state aside (the snapshot, labelled with the step
// they are of); after a failure it holds both parts at its committed step, and one step on where
// it updated them (KeptParts). If any rank committed step s+1, every rank had updated its parts to
// s+1 (the gather needs each part), so the newest committed step is always there, in every part
// with one holder left; live_parts.hpp puts the parts together on the next attempt's ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "common/status.hpp"
#include "training/collectives/shard_layout.hpp"
#include "training/loss_scaler.hpp"
#include "training/optimizer.hpp"
#include "training/update_share.hpp"

namespace dpl::training {

// One part a rank holds after a failure, flat: the values of the part's runs
// (ShardLayout::PartOfEveryBucket order), then each optimizer state of the same runs in turn.
struct KeptPart {
  int part = 0;
  std::vector<float> committed;  // at the rank's committed step
  std::vector<float> next;       // one step on (updated, not committed); empty: none
};

// What a rank of a sharded optimizer with copies keeps of its state after a failure.
struct KeptParts {
  int parts = 0;  // the ranks the state was cut among
  uint64_t layout_fingerprint = 0;
  int64_t committed_step = 0;
  std::vector<KeptPart> held;  // its own part, then the copy
  // At the committed step (an update under way changes them).
  int64_t optimizer_steps = 0;
  std::optional<LossScalingState> loss_scaling;
};

// Takes the elements of `runs` from `whole` (OptimizerRunner::WholeState's layout) into
// `optimizer`'s state, made over those runs (buffer k * runs + r is state k of run r).
void TakeRuns(const OptimizerState& whole, const std::vector<HostRun>& runs, Optimizer& optimizer);

// The floats of part `part` of `layout` flat (KeptPart) with `states` optimizer states.
size_t FlatPartElements(const ShardLayout& layout, int part, size_t states);

// The part one machine on from `part` among `parts`, `ranks_per_machine` ranks a machine; -1 where
// every part is on one machine.
int CopiedPartOf(int part, int parts, int ranks_per_machine);

class PartCopy {
 public:
  // A copy of part `part` of `layout` over `parameters`' values, updated by `optimizer` (made
  // over the part's runs).
  PartCopy(const std::vector<HostParameter>& parameters, const ShardLayout& layout, int part,
           std::unique_ptr<Optimizer> optimizer);

  Optimizer& optimizer() { return *optimizer_; }
  // Every rank: the averaged gradients of the copied part from the rank that holds them.
  Status GatherGradients(UpdateShare& share);
  // Before the update of step `global_step` + 1: this rank's part (`own`, with `own_optimizer`'s
  // state) and the copy as they are.
  void Snapshot(int64_t global_step, const std::vector<HostRun>& own, Optimizer& own_optimizer);
  // The copy's update (after the part's own, at its rate).
  void Step();
  // Takes the copied part's state from `whole` (laid out as OptimizerRunner::WholeState's).
  void Restore(const OptimizerState& whole);
  // After a failure, with `committed_step` the rank's committed step: both parts.
  KeptParts Keep(int64_t committed_step, const std::vector<HostRun>& own, Optimizer& own_optimizer,
                 int own_part, int64_t optimizer_steps,
                 const std::optional<LossScalingState>& loss_scaling) const;
  // The loss scaling as the step under way began (Keep's, when it began after the committed one).
  void BeganStep(int64_t global_step, int64_t optimizer_steps,
                 std::optional<LossScalingState> loss_scaling);

 private:
  const ShardLayout& layout_;
  int part_;
  std::vector<HostRun> runs_;  // values in the model, gradients in gradients_
  std::vector<std::vector<float>> gradients_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<float*> values_;
  std::vector<const float*> gradient_pointers_;
  // Where each run's gradients go, by (parameter, offset): GatherGradients' destination.
  std::map<std::pair<uint32_t, size_t>, float*> gradient_at_;
  // The snapshot: both parts of step snapshot_step_, taken before its update.
  int64_t snapshot_step_ = -1;
  std::vector<float> own_snapshot_, copy_snapshot_;
  // As the step under way began.
  int64_t began_step_ = -1;
  int64_t began_optimizer_steps_ = 0;
  std::optional<LossScalingState> began_loss_scaling_;
};

}  // namespace dpl::training
