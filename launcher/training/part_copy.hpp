// Note [A copy of each part] (--shard-copy): with --shard-optimizer through the backend each rank
// holds the optimizer state of its part only, so a lost machine would take its ranks' parts with
// it. Each rank also keeps a copy of the part of the rank one machine on (its rank plus the
// ranks per machine, modulo the world: another machine's). Once the step's gradients are
// unscaled and clipped, each rank sends its part's averaged gradients to the one rank that keeps
// its copy and receives those of the part it copies (backend ABI v5's send_receive, a (world size
// - 1)-th of the bytes of an allgather; a backend without it gathers every part), and each runs
// the optimizer on its copy as the owner runs it on the part: the same element-wise arithmetic on
// the same bits, so the copy stays the owner's bits. The copy has values of its own (the model's
// are the owner's once the step's gather is done), and it is updated late: at the start of the next
// step, with the learning rate of the step its gradients are of, so until then it is still at the
// committed step.
//
// How a sharded step is committed: on a rank, once the gather of the updated parts is done (its
// values are then the step's, whole). Between its update and that, an abort can leave a rank with
// its part one step on and the rest of its values half gathered. So before it updates, a rank
// copies its part's values and state aside (the snapshot, labelled with the step they are of);
// its copy needs none, being still at the committed step with the next step's gradients beside
// it. After a failure a rank holds both parts at its committed step, and one step on where it
// updated its part or holds the copy's next gradients (KeptParts). If any rank committed step s+1,
// every rank had updated its part to s+1 (the gather needs each part), so the newest committed
// step is always there, in every part with one holder left; live_parts.hpp puts the parts
// together on the next attempt's ranks.
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
// The part (the rank, through the backend) that keeps a copy of `part`: the one whose
// CopiedPartOf is `part`, one machine back; -1 where every part is on one machine.
int CopyHolderOf(int part, int parts, int ranks_per_machine);

// What a rank of a sharded optimizer keeps for a regroup in place (Note [Shrink in place] in
// live_state.hpp).
struct PartKeeping {
  int copied_part = -1;   // the part it keeps a copy of (Note [A copy of each part]); -1: none
  bool snapshot = false;  // its own part as before each update (PartSnapshot)
  int copy_holder = -1;   // the rank that keeps a copy of its part; -1: none
};

// A rank's own part as it was before its update of the step under way, and the optimizer's count
// and loss scaling as that step began: what the rank keeps of its part after a failure (how a
// sharded step is committed, above). Where every machine holds each part (the shared-memory sums
// across machines: Note [Sharded optimizer] in update_share.hpp) that is all it needs to keep;
// through the backend it keeps a copy of another machine's part besides (PartCopy).
class PartSnapshot {
 public:
  // As step `global_step` + 1 begins.
  void BeganStep(int64_t global_step, int64_t optimizer_steps,
                 std::optional<LossScalingState> loss_scaling);
  // Before the update of step `global_step` + 1: this rank's part (`own`, with `own_optimizer`'s
  // state) as it is.
  void Take(int64_t global_step, const std::vector<HostRun>& own, Optimizer& own_optimizer);
  // After a failure, with `committed_step` the rank's committed step: its own part (`own_part` of
  // `layout`) at that step, and one step on where it was updated since.
  KeptParts Keep(const ShardLayout& layout, int64_t committed_step, const std::vector<HostRun>& own,
                 Optimizer& own_optimizer, int own_part, int64_t optimizer_steps,
                 const std::optional<LossScalingState>& loss_scaling) const;

 private:
  // This rank's part of step snapshot_step_, taken before its update.
  int64_t snapshot_step_ = -1;
  std::vector<float> own_snapshot_;
  // As the step under way began.
  int64_t began_step_ = -1;
  int64_t began_optimizer_steps_ = 0;
  std::optional<LossScalingState> began_loss_scaling_;
};

class PartCopy {
 public:
  // A copy of part `part` of `layout` over `parameters`' values, updated by `optimizer` (made
  // over the part's runs), on a rank whose own part rank `holder` keeps a copy of.
  PartCopy(const std::vector<HostParameter>& parameters, const ShardLayout& layout, int part,
           int holder, std::unique_ptr<Optimizer> optimizer);

  Optimizer& optimizer() { return *optimizer_; }
  // At the start of step `global_step` + 1, the model's values those of step `global_step`: the
  // update of the step before, late, or where there was none the values of the model.
  void CatchUp();
  // Every rank: the averaged gradients of the copied part of step `global_step` + 1 from the
  // rank that holds them, and its own part's to the holder of its copy; the copy is updated
  // with them at the next CatchUp.
  Status ExchangeGradients(UpdateShare& share, int64_t global_step);
  // Takes the copied part's state from `whole` (laid out as OptimizerRunner::WholeState's).
  void Restore(const OptimizerState& whole);
  // After a failure, with `committed_step` the rank's committed step: the copied part at that
  // step, and one step on where its gradients came. Updates the copy (it is not used again).
  KeptPart Keep(int64_t committed_step);

 private:
  // The copy's update with the gathered gradients, at the rate of their step.
  void ApplyGradients();
  // The copy's values from the model's (which hold them when no update is pending).
  void TakeModelValues();

  const ShardLayout& layout_;
  int part_;
  int holder_;                 // the rank that keeps a copy of this rank's part
  std::vector<HostRun> runs_;  // values in values_, gradients in gradients_
  std::vector<std::vector<float>> values_, gradients_;
  std::vector<const float*> model_values_;  // each run's values in the model
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<float*> value_pointers_;
  std::vector<const float*> gradient_pointers_;
  // Where each run's gradients go, by (parameter, offset): ExchangeGradients' destination.
  std::map<std::pair<uint32_t, size_t>, float*> gradient_at_;
  // The step whose gradients gradients_ hold, not yet applied (-1: none), and its rate.
  int64_t pending_step_ = -1;
  double pending_rate_ = 0.0;
};

}  // namespace dpl::training
