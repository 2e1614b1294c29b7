#include "training/update_share.hpp"

#include <map>
#include <utility>

namespace dpl::training {
namespace {

class Alone final : public UpdateShare {
 public:
  explicit Alone(const std::vector<HostParameter>& parameters) : UpdateShare(parameters) {
    UpdateWholeParameters(parameters, [&](uint32_t p) { return parameters[p].gradient; });
    scaled_ = updated_;
  }
};

// This rank's part of every bucket, as runs with their values and averaged gradients.
std::vector<HostRun> PartOf(const std::vector<HostParameter>& parameters,
                            GradientReduction& reduction) {
  std::vector<HostRun> runs;
  const ShardLayout& layout = reduction.layout();
  for (size_t b = 0; b < layout.buckets(); ++b) {
    for (const ParameterRun& run : layout.RunsOf(b, reduction.part())) {
      runs.push_back(
          {run, parameters[run.parameter].value + run.offset, reduction.GradientOf(b, run)});
    }
  }
  return runs;
}

// The ranks that share parts: the flags of each and the barrier are the reduction's.
class SharedParts : public UpdateShare {
 public:
  SharedParts(const std::vector<HostParameter>& parameters, GradientReduction& reduction)
      : UpdateShare(parameters), reduction_(reduction) {}
  int parts() const override { return reduction_.layout().parts(); }
  int part() const override { return reduction_.part(); }
  Status ShareEntries(std::vector<double>* entries) override {
    return reduction_.ShareEntries(entries);
  }

 protected:
  GradientReduction& reduction_;
};

// Note [Scaling shared gradients]: every parameter, its averaged gradient where the machine's
// workers summed it; this worker scales its part.
class MachineGradients final : public SharedParts {
 public:
  MachineGradients(const std::vector<HostParameter>& parameters, GradientReduction& reduction)
      : SharedParts(parameters, reduction) {
    std::vector<float*> sums(parameters.size(), nullptr);
    const ShardLayout& layout = reduction.layout();
    for (size_t b = 0; b < layout.buckets(); ++b) {
      const BucketLayout& bucket = layout.bucket(b);
      for (size_t k = 0; k < bucket.parameters.size(); ++k) {
        const uint32_t p = bucket.parameters[k];
        sums[p] =
            reduction.GradientOf(b, ParameterRun{p, 0, parameters[p].elements, bucket.starts[k]});
      }
    }
    UpdateWholeParameters(parameters, [&](uint32_t p) { return sums[p]; });
    scaled_ = PartOf(parameters, reduction);
  }
  // The same factor on every worker: all of them wait here, or none.
  Status AfterClip() override { return reduction_.Barrier("a step of the sharded optimizer"); }
};

// Note [Sharded optimizer]: this rank's part only; the updated parts are gathered into every
// rank's values.
class OwnPart : public SharedParts {
 public:
  OwnPart(const std::vector<HostParameter>& parameters, GradientReduction& reduction)
      : SharedParts(parameters, reduction), parameters_(parameters) {
    updated_ = PartOf(parameters, reduction);
    scaled_ = updated_;
    for (const HostRun& run : updated_)
      gradient_at_[{run.run.parameter, run.run.offset}] = run.gradient;
  }
  bool sharded() const override { return true; }
  const ShardLayout* own_part_layout() const override { return &reduction_.layout(); }
  Status ExchangeGradients(int to, int from,
                           const std::function<float*(const ParameterRun&)>& destination) override {
    return reduction_
        .ExchangeParts(
            to, from,
            [this](const ParameterRun& run) {
              return gradient_at_.at({run.parameter, run.offset});
            },
            destination)
        .WithContext("sending the gradients of the parts' copies");
  }
  Status GatherState(
      size_t states, const std::function<const float*(size_t, const ParameterRun&)>& source,
      const std::function<float*(size_t, const ParameterRun&)>& destination) override;
  Status PublishParts(StepProfile* profile) override {
    auto place = [this](const ParameterRun& run) {
      return parameters_[run.parameter].value + run.offset;
    };
    DPL_RETURN_IF_ERROR(reduction_.GatherParts(place, place, /*again=*/false));
    profile->Lap(StepPhase::kCommunicationWait);
    return Status::Ok();
  }

 private:
  const std::vector<HostParameter>& parameters_;
  // This rank's averaged gradients of each run of its part, by (parameter, offset).
  std::map<std::pair<uint32_t, size_t>, const float*> gradient_at_;
};

Status OwnPart::GatherState(size_t states,
                            const std::function<const float*(size_t, const ParameterRun&)>& source,
                            const std::function<float*(size_t, const ParameterRun&)>& destination) {
  // The step's gather of the parameters just before may still be read from the same copy.
  DPL_RETURN_IF_ERROR(reduction_.Barrier("a step of the sharded optimizer"));
  for (size_t k = 0; k < states; ++k) {
    DPL_RETURN_IF_ERROR(
        reduction_
            .GatherParts([&](const ParameterRun& run) { return source(k, run); },
                         [&](const ParameterRun& run) { return destination(k, run); },
                         /*again=*/true)
            .WithContext("gathering the optimizer's state"));
  }
  return Status::Ok();
}

// Note [Shared parameters] in placement.hpp: every part is already in every worker's values; no
// worker may compute with them before all parts are updated.
class OwnPartOfSharedValues final : public OwnPart {
 public:
  using OwnPart::OwnPart;
  Status PublishParts(StepProfile* profile) override {
    DPL_RETURN_IF_ERROR(reduction_.Barrier("the updated parts of the shared parameters"));
    profile->Lap(StepPhase::kCommunicationWait);
    return Status::Ok();
  }
};

}  // namespace

UpdateShare::UpdateShare(const std::vector<HostParameter>& parameters) {
  for (const HostParameter& p : parameters) {
    first_piece_.push_back(pieces_);
    pieces_ += PiecesOf(p.elements);
  }
}

void UpdateShare::UpdateWholeParameters(const std::vector<HostParameter>& parameters,
                                        const std::function<float*(uint32_t)>& gradient) {
  updated_.clear();
  for (uint32_t p = 0; p < parameters.size(); ++p) {
    updated_.push_back(
        {ParameterRun{p, 0, parameters[p].elements, 0}, parameters[p].value, gradient(p)});
  }
}

std::unique_ptr<UpdateShare> WholeParameters(const std::vector<HostParameter>& parameters) {
  return std::make_unique<Alone>(parameters);
}

std::unique_ptr<UpdateShare> ShareOf(const std::vector<HostParameter>& parameters,
                                     GradientReduction& reduction) {
  switch (reduction.sums_left()) {
    case SumsLeft::kInEveryGradient:
      return WholeParameters(parameters);
    case SumsLeft::kSharedByTheMachine:
      return std::make_unique<MachineGradients>(parameters, reduction);
    case SumsLeft::kOwnPartOnly:
      break;
  }
  if (reduction.SharedValues().size > 0) {
    return std::make_unique<OwnPartOfSharedValues>(parameters, reduction);
  }
  return std::make_unique<OwnPart>(parameters, reduction);
}

}  // namespace dpl::training
