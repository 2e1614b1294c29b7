#include "training/part_copy.hpp"

#include <map>
#include <utility>

namespace dpl::training {
namespace {

// Appends the values of `runs`, then each state of `optimizer` (buffer k * runs + r), to `flat`.
void AppendFlat(const std::vector<HostRun>& runs, Optimizer& optimizer, std::vector<float>* flat) {
  for (const HostRun& run : runs)
    flat->insert(flat->end(), run.value, run.value + run.run.elements);
  const std::vector<std::vector<float>*> buffers = optimizer.StateBuffers();
  for (const std::vector<float>* buffer : buffers) {
    flat->insert(flat->end(), buffer->begin(), buffer->end());
  }
}

std::vector<float> Flat(const std::vector<HostRun>& runs, Optimizer& optimizer) {
  std::vector<float> flat;
  AppendFlat(runs, optimizer, &flat);
  return flat;
}

// `snapshot` is of the committed step when it was taken as the step after it began; else the
// part as it is now is.
KeptPart KeepPart(int part, bool updated, const std::vector<float>& snapshot,
                  const std::vector<HostRun>& runs, Optimizer& optimizer) {
  KeptPart kept{part, {}, {}};
  if (updated) {
    kept.committed = snapshot;
    kept.next = Flat(runs, optimizer);
  } else {
    kept.committed = Flat(runs, optimizer);
  }
  return kept;
}

}  // namespace

void TakeRuns(const OptimizerState& whole, const std::vector<HostRun>& runs, Optimizer& optimizer) {
  const std::vector<std::vector<float>*> buffers = optimizer.StateBuffers();
  for (size_t k = 0; k < whole.size(); ++k) {
    for (size_t r = 0; r < runs.size(); ++r) {
      const ParameterRun& run = runs[r].run;
      const float* from = whole[k][run.parameter].data() + run.offset;
      std::copy(from, from + run.elements, buffers[k * runs.size() + r]->begin());
    }
  }
}

size_t FlatPartElements(const ShardLayout& layout, int part, size_t states) {
  size_t elements = 0;
  for (const ParameterRun& run : layout.PartOfEveryBucket(part)) elements += run.elements;
  return elements * (1 + states);
}

int CopiedPartOf(int part, int parts, int ranks_per_machine) {
  if (ranks_per_machine < 1 || parts <= ranks_per_machine) return -1;
  return (part + ranks_per_machine) % parts;
}

PartCopy::PartCopy(const std::vector<HostParameter>& parameters, const ShardLayout& layout,
                   int part, std::unique_ptr<Optimizer> optimizer)
    : layout_(layout), part_(part), optimizer_(std::move(optimizer)) {
  for (const ParameterRun& run : layout.PartOfEveryBucket(part)) {
    gradients_.emplace_back(run.elements, 0.0f);
    runs_.push_back({run, parameters[run.parameter].value + run.offset, gradients_.back().data()});
    values_.push_back(runs_.back().value);
    gradient_pointers_.push_back(runs_.back().gradient);
    gradient_at_[{run.parameter, run.offset}] = runs_.back().gradient;
  }
}

Status PartCopy::GatherGradients(UpdateShare& share) {
  return share.GatherGradients([this](const ParameterRun& run) -> float* {
    auto found = gradient_at_.find({run.parameter, run.offset});
    return found == gradient_at_.end() ? nullptr : found->second;
  });
}

void PartCopy::Snapshot(int64_t global_step, const std::vector<HostRun>& own,
                        Optimizer& own_optimizer) {
  // clear keeps the capacity of the step before: no allocation, one copy.
  own_snapshot_.clear();
  AppendFlat(own, own_optimizer, &own_snapshot_);
  copy_snapshot_.clear();
  AppendFlat(runs_, *optimizer_, &copy_snapshot_);
  snapshot_step_ = global_step;
}

void PartCopy::Step() {
  optimizer_->Step(values_, gradient_pointers_);
}

void PartCopy::Restore(const OptimizerState& whole) {
  TakeRuns(whole, runs_, *optimizer_);
}

void PartCopy::BeganStep(int64_t global_step, int64_t optimizer_steps,
                         std::optional<LossScalingState> loss_scaling) {
  began_step_ = global_step;
  began_optimizer_steps_ = optimizer_steps;
  began_loss_scaling_ = std::move(loss_scaling);
}

KeptParts PartCopy::Keep(int64_t committed_step, const std::vector<HostRun>& own,
                         Optimizer& own_optimizer, int own_part, int64_t optimizer_steps,
                         const std::optional<LossScalingState>& loss_scaling) const {
  KeptParts kept;
  kept.parts = layout_.parts();
  kept.layout_fingerprint = layout_.Fingerprint();
  kept.committed_step = committed_step;
  const bool updated = snapshot_step_ == committed_step;
  kept.held.push_back(KeepPart(own_part, updated, own_snapshot_, own, own_optimizer));
  kept.held.push_back(KeepPart(part_, updated, copy_snapshot_, runs_, *optimizer_));
  const bool began = began_step_ == committed_step;
  kept.optimizer_steps = began ? began_optimizer_steps_ : optimizer_steps;
  kept.loss_scaling = began ? began_loss_scaling_ : loss_scaling;
  return kept;
}

}  // namespace dpl::training
