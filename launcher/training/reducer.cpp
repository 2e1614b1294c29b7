#include "training/reducer.hpp"

#include "common/log.hpp"

namespace dpl::training {
namespace {

// One rank alone: backward left the gradients where the optimizer reads them, unscaled.
class Alone final : public GradientReducer {
 public:
  Alone(Model& model, ParameterPlacement& placement)
      : model_(model), placement_(placement), share_(WholeParameters(placement.parameters())) {}

  void BeginStep(float /*scale*/) override {}
  Result<float> Finish(const Status& step, float scale, StepProfile* profile) override {
    DPL_RETURN_IF_ERROR(step);
    profile->Lap(StepPhase::kCommunicationWait);
    return placement_.TakeGradients(scale, profile);
  }
  Status ResetGradients(StepProfile* profile) override {
    DPL_RETURN_IF_ERROR(model_.ZeroGradients());
    profile->Lap(StepPhase::kOptimizer);
    return Status::Ok();
  }
  UpdateShare& share() override { return *share_; }

 private:
  Model& model_;
  ParameterPlacement& placement_;
  std::unique_ptr<UpdateShare> share_;
};

// The buckets summed through the front's reduction as backward reports them ready.
class BucketReducer : public GradientReducer {
 public:
  BucketReducer(Model& model, ParameterPlacement& placement,
                std::unique_ptr<GradientReduction> reduction, std::vector<Bucket> buckets,
                GradientScaling scaling)
      : model_(model),
        placement_(placement),
        reduction_(std::move(reduction)),
        sync_(*reduction_, std::move(buckets), placement.parameters().size()),
        share_(ShareOf(placement.parameters(), *reduction_)),
        scaling_(scaling) {}

  void BeginStep(float scale) override { sync_.BeginStep(scale); }
  Result<float> Finish(const Status& step, float scale, StepProfile* profile) override {
    const Status reduced = sync_.FinishStep();  // always drain the communication thread
    DPL_RETURN_IF_ERROR(step);
    DPL_RETURN_IF_ERROR(reduced.WithContext("averaging gradients"));
    profile->Lap(StepPhase::kCommunicationWait);
    return placement_.TakeGradients(scaling_ == GradientScaling::kInBucket ? 1.0f : scale, profile);
  }
  // The shared-memory sums may have left the model's gradients zero (Note [Reduction through
  // shared memory], step 1).
  Status ResetGradients(StepProfile* profile) override {
    if (!reduction_->zeroes_gradients()) DPL_RETURN_IF_ERROR(model_.ZeroGradients());
    profile->Lap(StepPhase::kOptimizer);
    return Status::Ok();
  }
  UpdateShare& share() override { return *share_; }
  bool SharesValues() const override { return reduction_->SharedValues().size > 0; }
  // Note [Shared parameters]: each worker writes the machine's one copy on its own schedule, rank
  // 0's initial values as its broadcast arrives (a sender may return before a receiver has written
  // them) and then a checkpoint's values. The writes are the same bytes, the last of each worker
  // the restored ones; but a worker that went on to train could read another's late write of the
  // initial values in between. So all finish writing before any trains.
  Status SettleSharedValues() override {
    if (!SharesValues()) return Status::Ok();
    return reduction_->Barrier("the parameters' values written into shared memory");
  }
  Status Detach() override { return model_.SetGradientReadyCallback(nullptr, nullptr); }
  // The model calls back as each gradient is ready.
  Status Attach() {
    return model_.SetGradientReadyCallback(GradientSynchronizer::GradientReadyTrampoline, &sync_);
  }

 protected:
  Model& model_;
  ParameterPlacement& placement_;
  std::unique_ptr<GradientReduction> reduction_;
  GradientSynchronizer sync_;
  std::unique_ptr<UpdateShare> share_;
  GradientScaling scaling_;
};

// The host copy, read after backward, summed in host memory (no callbacks: FinishStep launches
// every bucket).
class HostCopyReducer final : public BucketReducer {
 public:
  HostCopyReducer(Model& model, HostSumsPlacement& placement,
                  std::unique_ptr<GradientReduction> reduction, std::vector<Bucket> buckets)
      : BucketReducer(model, placement, std::move(reduction), std::move(buckets),
                      GradientScaling::kInBucket),
        copy_(placement) {}

  Result<float> Finish(const Status& step, float /*scale*/, StepProfile* profile) override {
    Status read = step;
    if (read.ok()) read = copy_.ReadGradients();
    profile->Lap(StepPhase::kCopies);
    const Status reduced = sync_.FinishStep();
    DPL_RETURN_IF_ERROR(read);
    DPL_RETURN_IF_ERROR(reduced.WithContext("averaging gradients"));
    profile->Lap(StepPhase::kCommunicationWait);
    return 1.0f;
  }

 private:
  HostSumsPlacement& copy_;
};

// The plan of the placement's gradients, bucketed.
ReductionPlan PlanOf(const Model& model, const ParameterPlacement& placement,
                     const PlacementSettings& settings, const char* summed_in) {
  ReductionPlan plan;
  plan.gradients = placement.SummedGradients();
  std::vector<size_t> sizes;
  for (const HostParameter& p : placement.parameters()) sizes.push_back(p.elements);
  plan.buckets = AssignBuckets(sizes, settings.bucket_cap_bytes);
  plan.wire = settings.wire;
  plan.stream = model.info().stream;
  plan.bucket_cap_bytes = settings.bucket_cap_bytes;
  plan.summed_in = summed_in;
  return plan;
}

// Note [Shared parameters]: the model computes with the machine's one copy of the values.
Status ShareValues(Model& model, InPlacePlacement& placement, GradientReduction& reduction,
                   FloatSpan values, int local_rank) {
  if (local_rank == 0) {
    DPL_RETURN_IF_ERROR(model.ReadTensors(DPL_MODEL_TENSORS_VALUES, values.data, values.size));
  }
  DPL_RETURN_IF_ERROR(reduction.Barrier("the parameters' values in shared memory"));
  DPL_RETURN_IF_ERROR(model.ShareParameters(values.data, values.size));
  placement.MoveValuesTo(values.data);
  return Status::Ok();
}

// Note [Gradients in shared memory] (collectives/local_reduce.hpp): the model keeps its gradients
// in this worker's area, where the reduction can read them.
Status ShareGradients(Model& model, InPlacePlacement& placement, GradientReduction& reduction) {
  if (!model.Has(ModelCapability::kShareGradients)) return Status::Ok();
  const FloatSpan area = reduction.UseModelGradientArea();
  if (area.size == 0) return Status::Ok();
  DPL_RETURN_IF_ERROR(model.ShareGradients(area.data, area.size));
  placement.MoveGradientsTo(area.data);
  return Status::Ok();
}

Result<std::unique_ptr<GradientReducer>> Attached(std::unique_ptr<BucketReducer> reducer) {
  DPL_RETURN_IF_ERROR(reducer->Attach());
  return std::unique_ptr<GradientReducer>(std::move(reducer));
}

}  // namespace

std::unique_ptr<GradientReducer> LocalGradients(Model& model, ParameterPlacement& placement) {
  return std::make_unique<Alone>(model, placement);
}

Result<std::unique_ptr<GradientReducer>> ReduceInPlace(Model& model, InPlacePlacement& placement,
                                                       Collectives& collectives,
                                                       const PlacementSettings& settings) {
  ReductionPlan plan = PlanOf(model, placement, settings, "in the model's memory");
  plan.sharded = settings.shard_optimizer;
  plan.in_place = true;
  plan.gradients_replaced = model.Has(ModelCapability::kReplacedGradients);
  // Note [Shared parameters]; not where the run keeps its state over a regroup: one copy of the
  // values that a machine's workers update in parts can be left half written by an abort, and
  // each worker's own values hold the parts it hands over (Note [Shrink in place]).
  plan.shared_values =
      plan.sharded && model.Has(ModelCapability::kShareParameters) && !settings.keeps_live_state;
  std::vector<Bucket> buckets = plan.buckets;
  DPL_ASSIGN_OR_RETURN(std::unique_ptr<GradientReduction> reduction,
                       collectives.ReduceGradients(std::move(plan)));
  const FloatSpan values = reduction->SharedValues();
  if (values.size > 0) {
    DPL_RETURN_IF_ERROR(
        ShareValues(model, placement, *reduction, values, settings.local.local_rank));
  }
  DPL_RETURN_IF_ERROR(ShareGradients(model, placement, *reduction));
  if (settings.rank == 0) log::Info(reduction->Describe());
  return Attached(std::make_unique<BucketReducer>(model, placement, std::move(reduction),
                                                  std::move(buckets), GradientScaling::kInBucket));
}

Result<std::unique_ptr<GradientReducer>> ReduceOnModel(Model& model, ParameterPlacement& placement,
                                                       Collectives& collectives,
                                                       const PlacementSettings& settings) {
  const WireFormat format = settings.wire.format;
  if (format != WireFormat::kNone && !settings.wire.from_precision) {
    return Status::InvalidArgument(
        std::string("--grad-compression ") + NameOf(WireFormatNames(), format) +
        " converts gradients in host memory, but with --device " +
        NameOf(DeviceNames(), settings.device) + " and the '" + collectives.name() +
        "' backend they are summed on the device; use --grad-compression none");
  }
  if (format != WireFormat::kNone && settings.rank == 0) {
    log::Info(std::string("the gradients are summed on the device in float32: ") +
              NameOf(WireFormatNames(), format) +
              " buckets (--grad-compression auto) are made in host memory only");
  }
  ReductionPlan plan = PlanOf(model, placement, settings, "in the model's memory");
  plan.wire.format = WireFormat::kNone;
  plan.scaling = GradientScaling::kByCaller;
  std::vector<Bucket> buckets = plan.buckets;
  DPL_ASSIGN_OR_RETURN(std::unique_ptr<GradientReduction> reduction,
                       collectives.ReduceGradients(std::move(plan)));
  if (settings.rank == 0) log::Info(reduction->Describe());
  return Attached(std::make_unique<BucketReducer>(model, placement, std::move(reduction),
                                                  std::move(buckets), GradientScaling::kByCaller));
}

Result<std::unique_ptr<GradientReducer>> ReduceHostCopy(Model& model, HostSumsPlacement& placement,
                                                        Collectives& collectives,
                                                        const PlacementSettings& settings) {
  ReductionPlan plan = PlanOf(model, placement, settings, "in the host copy");
  plan.stream = nullptr;
  std::vector<Bucket> buckets = plan.buckets;
  DPL_ASSIGN_OR_RETURN(std::unique_ptr<GradientReduction> reduction,
                       collectives.ReduceGradients(std::move(plan)));
  if (settings.rank == 0) log::Info(reduction->Describe());
  return std::unique_ptr<GradientReducer>(
      new HostCopyReducer(model, placement, std::move(reduction), std::move(buckets)));
}

}  // namespace dpl::training
