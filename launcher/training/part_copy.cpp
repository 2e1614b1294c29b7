#include "training/part_copy.hpp"

#include <algorithm>
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

int CopyHolderOf(int part, int parts, int ranks_per_machine) {
  if (ranks_per_machine < 1 || parts <= ranks_per_machine) return -1;
  return (part - ranks_per_machine + parts) % parts;
}

PartCopy::PartCopy(const std::vector<HostParameter>& parameters, const ShardLayout& layout,
                   int part, int holder, std::unique_ptr<Optimizer> optimizer)
    : layout_(layout), part_(part), holder_(holder), optimizer_(std::move(optimizer)) {
  for (const ParameterRun& run : layout.PartOfEveryBucket(part)) {
    const float* in_model = parameters[run.parameter].value + run.offset;
    values_.emplace_back(in_model, in_model + run.elements);
    gradients_.emplace_back(run.elements, 0.0f);
    model_values_.push_back(in_model);
    runs_.push_back({run, values_.back().data(), gradients_.back().data()});
    value_pointers_.push_back(runs_.back().value);
    gradient_pointers_.push_back(runs_.back().gradient);
    gradient_at_[{run.parameter, run.offset}] = runs_.back().gradient;
  }
}

void PartCopy::ApplyGradients() {
  optimizer_->set_learning_rate(pending_rate_);
  optimizer_->Step(value_pointers_, gradient_pointers_);
  pending_step_ = -1;
}

void PartCopy::TakeModelValues() {
  for (size_t r = 0; r < runs_.size(); ++r) {
    std::copy(model_values_[r], model_values_[r] + runs_[r].run.elements, values_[r].begin());
  }
}

void PartCopy::CatchUp() {
  // The rate of the step to come is set after this, so the late update sets its own.
  if (pending_step_ >= 0) {
    ApplyGradients();
  } else {
    TakeModelValues();  // after a restore, or a step the loss scaler skipped
  }
}

Status PartCopy::ExchangeGradients(UpdateShare& share, int64_t global_step) {
  DPL_RETURN_IF_ERROR(
      share.ExchangeGradients(holder_, part_, [this](const ParameterRun& run) -> float* {
        auto found = gradient_at_.find({run.parameter, run.offset});
        return found == gradient_at_.end() ? nullptr : found->second;
      }));
  pending_step_ = global_step + 1;
  pending_rate_ = optimizer_->learning_rate();
  return Status::Ok();
}

void PartCopy::Restore(const OptimizerState& whole) {
  TakeRuns(whole, runs_, *optimizer_);
  pending_step_ = -1;  // the values follow from the model's at the next CatchUp
}

KeptPart PartCopy::Keep(int64_t committed_step) {
  // The copy at the committed step: that step's late update still to run, or with none pending
  // no update began since the commit, and the model's values are the committed step's.
  if (pending_step_ == committed_step) {
    ApplyGradients();
  } else if (pending_step_ < 0) {
    TakeModelValues();
  }
  KeptPart copy{part_, Flat(runs_, *optimizer_), {}};
  if (pending_step_ == committed_step + 1) {
    ApplyGradients();
    copy.next = Flat(runs_, *optimizer_);
  }
  return copy;
}

void PartSnapshot::BeganStep(int64_t global_step, int64_t optimizer_steps,
                             std::optional<LossScalingState> loss_scaling) {
  began_step_ = global_step;
  began_optimizer_steps_ = optimizer_steps;
  began_loss_scaling_ = std::move(loss_scaling);
}

void PartSnapshot::Take(int64_t global_step, const std::vector<HostRun>& own,
                        Optimizer& own_optimizer) {
  // clear keeps the capacity of the step before: no allocation, one copy.
  own_snapshot_.clear();
  AppendFlat(own, own_optimizer, &own_snapshot_);
  snapshot_step_ = global_step;
}

KeptParts PartSnapshot::Keep(const ShardLayout& layout, int64_t committed_step,
                             const std::vector<HostRun>& own, Optimizer& own_optimizer,
                             int own_part, int64_t optimizer_steps,
                             const std::optional<LossScalingState>& loss_scaling) const {
  KeptParts kept;
  kept.parts = layout.parts();
  kept.layout_fingerprint = layout.Fingerprint();
  kept.committed_step = committed_step;
  const bool updated = snapshot_step_ == committed_step;
  kept.held.push_back(KeepPart(own_part, updated, own_snapshot_, own, own_optimizer));
  const bool began = began_step_ == committed_step;
  kept.optimizer_steps = began ? began_optimizer_steps_ : optimizer_steps;
  kept.loss_scaling = began ? began_loss_scaling_ : loss_scaling;
  return kept;
}

}  // namespace dpl::training
