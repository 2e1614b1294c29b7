#include "training/collectives/shared_memory_collectives.hpp"

#include "common/log.hpp"
#include "training/host_tensor.hpp"

namespace dpl::training {
namespace {

observability::CollectiveActivity Activity(const char* collective, int32_t bucket = -1,
                                           int32_t buckets = 0, uint64_t bytes = 0) {
  observability::CollectiveActivity activity;
  activity.collective = collective;
  activity.bucket = bucket;
  activity.buckets = buckets;
  activity.bytes = bytes;
  return activity;
}

// The buckets' reduction through the machine's shared memory; unsharded, Finish waits for every
// worker's part (the optimizer reads every gradient).
class SharedMemoryReduction final : public GradientReduction {
 public:
  SharedMemoryReduction(std::unique_ptr<LocalReducer> reducer, CommunicationThread& thread,
                        ReductionPlan plan)
      : reducer_(std::move(reducer)), thread_(thread), plan_(std::move(plan)) {}

  std::string Describe() const override;
  void BeginStep() override { reducer_->BeginStep(); }
  std::future<Status> Launch(size_t bucket, float scale) override {
    const uint64_t bytes = plan_.buckets[bucket].elements * sizeof(float);
    return thread_.Submit(
        [this, bucket, scale] { return reducer_->ReduceBucket(bucket, plan_.gradients, scale); },
        Activity("shared-memory reduce", int32_t(bucket), int32_t(plan_.buckets.size()), bytes));
  }
  // The other workers' parts, watched as a collective is, so that a peer stopped in its part
  // gets a stall post.
  Status Finish() override {
    if (plan_.sharded) return Status::Ok();
    uint64_t bytes = 0;
    for (const Bucket& bucket : plan_.buckets) bytes += bucket.elements * sizeof(float);
    return thread_.Run([this] { return reducer_->AwaitSums(); },
                       Activity("shared-memory sums", -1, int32_t(plan_.buckets.size()), bytes));
  }

  SumsLeft sums_left() const override {
    return plan_.sharded ? SumsLeft::kOwnPartOnly : SumsLeft::kSharedByTheMachine;
  }
  const ShardLayout& layout() const override { return reducer_->layout(); }
  int part() const override { return reducer_->group().local_rank; }
  float* GradientOf(size_t bucket, const ParameterRun& run) override {
    return reducer_->sums(bucket) + run.flat;
  }
  Status ShareEntries(std::vector<double>* values) override {
    return thread_.Run([&] { return reducer_->ShareEntries(values); },
                       Activity("shared-memory barrier"));
  }
  Status Barrier(const char* what) override {
    return thread_.Run([&] { return reducer_->Barrier(what); }, Activity("shared-memory barrier"));
  }
  Status GatherParts(const std::function<const float*(const ParameterRun&)>& source,
                     const std::function<float*(const ParameterRun&)>& destination,
                     bool again) override {
    return thread_.Run([&] { return reducer_->GatherParts(source, destination, again); },
                       Activity("shared-memory barrier"));
  }

  bool zeroes_gradients() const override { return reducer_->zeroes_gradients(); }
  FloatSpan SharedValues() override {
    if (reducer_->values() == nullptr) return {};
    return {reducer_->values(), reducer_->layout().elements()};
  }
  FloatSpan UseModelGradientArea() override {
    if (!reducer_->UseModelGradients()) return {};
    float* area = reducer_->ModelGradients(reducer_->group().local_rank);
    for (DLTensor& gradient : plan_.gradients) {  // the model's gradients move there
      gradient.data = area;
      gradient.byte_offset = 0;
      area += ElementCount(gradient);
    }
    return {reducer_->ModelGradients(reducer_->group().local_rank), reducer_->layout().elements()};
  }

 private:
  std::unique_ptr<LocalReducer> reducer_;
  CommunicationThread& thread_;
  ReductionPlan plan_;
};

// Where the machine's sums go next, and in which format (Note [16-bit gradients between machines
// only] in precision.cpp).
std::string AcrossMachinesText(const LocalGroup& group, const GradientWire& wire) {
  if (group.machines > 1) {
    return ", their parts then across the " + std::to_string(group.machines) + " machines" +
           WireText(wire);
  }
  if (wire.format == WireFormat::kNone) return "";
  return std::string(" (--grad-compression ") + NameOf(WireFormatNames(), wire.format) +
         " applies between machines only)";
}

std::string SharedMemoryReduction::Describe() const {
  const LocalGroup& group = reducer_->group();
  return "gradients of " + std::to_string(plan_.gradients.size()) + " parameters in " +
         std::to_string(plan_.buckets.size()) + " bucket(s) of at most " +
         log::Bytes(uint64_t(plan_.bucket_cap_bytes)) +
         ", summed in the shared memory of each machine's " +
         std::to_string(group.local_world_size) + " workers" +
         AcrossMachinesText(group, plan_.wire) +
         (plan_.sharded ? "; each worker of a machine updates its part of the parameters" : "") +
         (reducer_->values() != nullptr ? ", which the machine's workers share (one copy a machine)"
                                        : "") +
         (reducer_->reads_model_gradients() ? "; the models keep their gradients there" : "");
}

}  // namespace

bool SharedMemoryCollectives::Reaches(const DLDevice& device) const {
  return InHostMemory(device);
}

Status SharedMemoryCollectives::Refuse(const char* call) const {
  return Status::Error(DPL_ERR_UNSUPPORTED,
                       name_ + " sums gradient buckets only, not " + std::string(call));
}

Status SharedMemoryCollectives::SumScalars(const std::string&, std::vector<double>*) {
  return Refuse("scalars");
}

Result<std::vector<uint64_t>> SharedMemoryCollectives::GatherWords(const std::vector<uint64_t>&,
                                                                   const std::string&) {
  return Refuse("a gather");
}

Result<bool> SharedMemoryCollectives::AnyRankSays(const std::string&, int64_t, bool) {
  return Refuse("a vote");
}

Status SharedMemoryCollectives::Barrier(const std::string&) {
  return Refuse("a barrier of the job");
}

Status SharedMemoryCollectives::BroadcastTensors(const std::vector<DLTensor>&, int, void*,
                                                 const observability::CollectiveActivity&) {
  return Refuse("a broadcast");
}

Result<std::unique_ptr<GradientReduction>> SharedMemoryCollectives::ReduceGradients(
    ReductionPlan plan) {
  std::vector<size_t> sizes;
  for (const DLTensor& gradient : plan.gradients) sizes.push_back(ElementCount(gradient));
  ShardLayout layout(sizes, plan.buckets, group_.local_world_size);
  // Per step a worker shares each part's overflow flag and the norm's piece sums.
  const size_t entries = size_t(group_.local_world_size) + layout.pieces();
  LocalGroup group = group_;
  group.abort = thread_.abort_signal();
  DPL_ASSIGN_OR_RETURN(std::unique_ptr<LocalReducer> reducer,
                       LocalReducer::Create(group, std::move(layout), plan.wire.format,
                                            plan.sharded, entries, plan.shared_values));
  if (plan.gradients_replaced) reducer->KeepGradients();
  return std::unique_ptr<GradientReduction>(
      new SharedMemoryReduction(std::move(reducer), thread_, std::move(plan)));
}

}  // namespace dpl::training
