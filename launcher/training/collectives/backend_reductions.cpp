// The backend path's reductions of gradient buckets: allreduced, or reduce-scattered for the
// sharded optimizer (Note [Sharded optimizer] in update_share.hpp).
//
// Note [Buckets in place]: when a bucket's gradients lie back to back in memory (the dpl torch
// helper makes every gradient a view into one buffer), the bucket is reduced in place with ONE
// collective on that stretch of memory: no staging copy, and it works on device memory the host
// cannot touch. Otherwise host gradients are staged through one flat buffer, and device
// gradients get one collective each.
#include <algorithm>
#include <cstring>
#include <optional>

#include "common/log.hpp"
#include "training/collectives/backend_collectives.hpp"
#include "training/host_tensor.hpp"

namespace dpl::training {
namespace {

constexpr DLDataType kFloat32{kDLFloat, 32, 1};

uintptr_t AddressOf(const DLTensor& tensor) {
  return reinterpret_cast<uintptr_t>(tensor.data) + tensor.byte_offset;
}

// One 1-d tensor over the bucket's gradients when they lie back to back in index order (Note
// [Buckets in place]); the bucket's indices are consecutive, in reverse order.
std::optional<DLTensor> InPlaceTensorOf(const std::vector<DLTensor>& gradients,
                                        const Bucket& bucket, int64_t* shape) {
  uint32_t first = bucket.parameter_indices.front();
  for (uint32_t p : bucket.parameter_indices) first = std::min(first, p);
  for (uint32_t i = first; i + 1 < first + bucket.parameter_indices.size(); ++i) {
    const bool adjacent = AddressOf(gradients[i]) + ElementCount(gradients[i]) * sizeof(float) ==
                              AddressOf(gradients[i + 1]) &&
                          gradients[i].device.device_type == gradients[i + 1].device.device_type &&
                          gradients[i].device.device_id == gradients[i + 1].device.device_id;
    if (!adjacent) return std::nullopt;
  }
  DLTensor whole = gradients[first];
  *shape = int64_t(bucket.elements);
  whole.ndim = 1;
  whole.shape = shape;
  whole.strides = nullptr;
  return whole;
}

std::vector<size_t> SizesOf(const std::vector<DLTensor>& gradients) {
  std::vector<size_t> sizes;
  for (const DLTensor& gradient : gradients) sizes.push_back(ElementCount(gradient));
  return sizes;
}

observability::CollectiveActivity BucketActivity(const char* collective,
                                                 const std::vector<Bucket>& buckets, size_t b) {
  observability::CollectiveActivity activity;
  activity.collective = collective;
  activity.bucket = int32_t(b);
  activity.buckets = int32_t(buckets.size());
  activity.bytes = buckets[b].elements * sizeof(float);  // of gradients, before a 16-bit wire
  return activity;
}

// "gradients of 8 parameters in 2 bucket(s)".
std::string Buckets(const ReductionPlan& plan) {
  return "gradients of " + std::to_string(plan.gradients.size()) + " parameters in " +
         std::to_string(plan.buckets.size()) + " bucket(s)";
}

Status NobodySharesParts(const char* what) {
  return Status::Error(DPL_ERR_UNSUPPORTED,
                       std::string("an allreduce of whole buckets shares no parts (") + what + ")");
}

// Every bucket allreduced whole: every rank holds every sum.
class AllreduceReduction final : public GradientReduction {
 public:
  AllreduceReduction(Backend& backend, CommunicationThread& thread, ReductionPlan plan)
      : backend_(backend),
        thread_(thread),
        plan_(std::move(plan)),
        layout_(SizesOf(plan_.gradients), plan_.buckets, 1),
        host_memory_(plan_.gradients.empty() || InHostMemory(plan_.gradients.front().device)),
        in_place_(plan_.buckets.size()),
        in_place_shapes_(plan_.buckets.size()) {
    size_t largest_staged = 0, largest = 0;
    for (size_t b = 0; b < plan_.buckets.size(); ++b) {
      in_place_[b] = InPlaceTensorOf(plan_.gradients, plan_.buckets[b], &in_place_shapes_[b]);
      if (!in_place_[b]) largest_staged = std::max(largest_staged, plan_.buckets[b].elements);
      largest = std::max(largest, plan_.buckets[b].elements);
    }
    if (host_memory_) flat_.resize(largest_staged);
    if (host_memory_ && plan_.wire.format != WireFormat::kNone) flat16_.resize(largest);
  }

  std::string Describe() const override {
    return Buckets(plan_) + " of at most " + log::Bytes(uint64_t(plan_.bucket_cap_bytes)) +
           ", summed " + plan_.summed_in + WireText(plan_.wire);
  }
  std::future<Status> Launch(size_t bucket, float scale) override {
    return thread_.Submit([this, bucket, scale] { return Reduce(bucket, scale); },
                          BucketActivity("allreduce", plan_.buckets, bucket));
  }
  // Device collectives may still run on the backend's own stream (backend ABI v2).
  Status Finish() override {
    if (host_memory_) return Status::Ok();
    return thread_.Run([this] { return backend_.Synchronize(plan_.stream); },
                       {"synchronize", -1, 0, 0});
  }

  SumsLeft sums_left() const override { return SumsLeft::kInEveryGradient; }
  const ShardLayout& layout() const override { return layout_; }
  int part() const override { return 0; }
  float* GradientOf(size_t /*bucket*/, const ParameterRun& run) override {
    return HostData<float>(plan_.gradients[run.parameter]) + run.offset;
  }
  Status ShareEntries(std::vector<double>*) override { return NobodySharesParts("entries"); }
  Status Barrier(const char* what) override { return NobodySharesParts(what); }
  Status GatherParts(const std::function<const float*(const ParameterRun&)>&,
                     const std::function<float*(const ParameterRun&)>&, bool) override {
    return NobodySharesParts("a gather");
  }

 private:
  Status Reduce(size_t b, float scale);
  Status ReduceHostFloats(float* data, size_t elements, float scale);
  Status Allreduce(DLTensor tensor) {
    return backend_.Allreduce(&tensor, DPL_REDUCE_SUM, host_memory_ ? nullptr : plan_.stream);
  }

  Backend& backend_;
  CommunicationThread& thread_;
  ReductionPlan plan_;  // its wire format falls back to float32 where the backend has no 16 bits
  ShardLayout layout_;  // one part
  bool host_memory_;
  // Per bucket: one tensor over all its gradients when they lie back to back (Note [Buckets in
  // place]), else nullopt; the shapes those tensors point to.
  std::vector<std::optional<DLTensor>> in_place_;
  std::vector<int64_t> in_place_shapes_;
  std::vector<float> flat_;
  std::vector<uint16_t> flat16_;
};

Status AllreduceReduction::Reduce(size_t b, float scale) {
  const Bucket& bucket = plan_.buckets[b];
  const std::optional<DLTensor>& whole = in_place_[b];
  if (!host_memory_) {
    // Device memory: the collectives are issued on the default stream after the work that
    // produced the gradients; the caller reads (and scales) them later, in stream order.
    if (whole) return Allreduce(*whole);
    for (uint32_t p : bucket.parameter_indices) DPL_RETURN_IF_ERROR(Allreduce(plan_.gradients[p]));
    return Status::Ok();
  }
  if (whole) return ReduceHostFloats(HostData<float>(*whole), bucket.elements, scale);
  float* flat = flat_.data();
  size_t offset = 0;
  for (uint32_t p : bucket.parameter_indices) {
    const size_t n = ElementCount(plan_.gradients[p]);
    std::memcpy(flat + offset, HostData<const char>(plan_.gradients[p]), n * sizeof(float));
    offset += n;
  }
  DPL_RETURN_IF_ERROR(ReduceHostFloats(flat, bucket.elements, scale));
  offset = 0;
  for (uint32_t p : bucket.parameter_indices) {
    const size_t n = ElementCount(plan_.gradients[p]);
    std::memcpy(HostData<char>(plan_.gradients[p]), flat + offset, n * sizeof(float));
    offset += n;
  }
  return Status::Ok();
}

Status AllreduceReduction::ReduceHostFloats(float* data, size_t elements, float scale) {
  if (plan_.scaling == GradientScaling::kByCaller) scale = 1.0f;
  WireFormat& wire = plan_.wire.format;
  if (wire != WireFormat::kNone) {
    const bool half = wire == WireFormat::kFp16;
    const Status status = AllreduceIn16Bits(backend_, wire, data, elements, scale, &flat16_);
    if (status.ok()) return Status::Ok();
    if (status.code() != DPL_ERR_UNSUPPORTED) return status;
    log::Warning("backend '" + backend_.name() + "' cannot allreduce " + (half ? "fp16" : "bf16") +
                 " tensors, so the gradients are sent as float32 for the rest of the run (" +
                 status.message() + ")");
    wire = WireFormat::kNone;
  }
  return SumHostFloats(backend_, WireFormat::kNone, data, elements, scale, &flat16_);
}

// The sharded optimizer's reduction through the backend (Note [Sharded optimizer] in
// update_share.hpp): one part per rank, each bucket staged into world-size slots of its largest
// part, reduce-scattered, this rank's slot scaled; the updated parts gathered back by an in-place
// allgather of the same slots (dpl/backend.h).
class ReduceScatterReduction final : public GradientReduction {
 public:
  ReduceScatterReduction(Backend& backend, CommunicationThread& thread, int rank, int size,
                         ReductionPlan plan)
      : backend_(backend),
        thread_(thread),
        rank_(rank),
        plan_(std::move(plan)),
        layout_(SizesOf(plan_.gradients), plan_.buckets, size) {
    size_t total = 0;
    for (size_t b = 0; b < layout_.buckets(); ++b) {
      offsets_.push_back(total);
      total += size_t(layout_.parts()) * layout_.bucket(b).largest_part;
    }
    gradient_slots_.assign(total, 0.0f);
    value_slots_.assign(total, 0.0f);
  }

  std::string Describe() const override {
    return Buckets(plan_) + ", reduce-scattered through backend '" + backend_.name() +
           "' in float32" + (plan_.wire.format == WireFormat::kNone ? "" : " (not 16-bit)") +
           "; each rank updates its part of the parameters";
  }
  std::future<Status> Launch(size_t bucket, float scale) override {
    return thread_.Submit([this, bucket, scale] { return Reduce(bucket, scale); },
                          BucketActivity("reduce_scatter", plan_.buckets, bucket));
  }
  Status Finish() override { return Status::Ok(); }

  SumsLeft sums_left() const override { return SumsLeft::kOwnPartOnly; }
  const ShardLayout& layout() const override { return layout_; }
  int part() const override { return rank_; }
  float* GradientOf(size_t bucket, const ParameterRun& run) override {
    const size_t first = layout_.bucket(bucket).bounds[size_t(rank_)];
    return Slot(gradient_slots_, bucket, rank_) + (run.flat - first);
  }
  Status ShareEntries(std::vector<double>* values) override {
    int64_t shape[1] = {int64_t(values->size())};
    DLTensor tensor = HostTensor(values->data(), DLDataType{kDLFloat, 64, 1}, 1, shape);
    return thread_.Run([&] { return backend_.Allreduce(&tensor, DPL_REDUCE_SUM, nullptr); },
                       {"allreduce", -1, 0, values->size() * sizeof(double)});
  }
  Status Barrier(const char* /*what*/) override {
    return thread_.Run([this] { return backend_.Barrier(); }, {"barrier", -1, 0, 0});
  }
  Status GatherParts(const std::function<const float*(const ParameterRun&)>& source,
                     const std::function<float*(const ParameterRun&)>& destination,
                     bool again) override;
  Status ExchangeParts(int to, int from,
                       const std::function<const float*(const ParameterRun&)>& source,
                       const std::function<float*(const ParameterRun&)>& destination) override;

 private:
  float* Slot(std::vector<float>& staging, size_t bucket, int part) {
    return staging.data() + offsets_[bucket] + size_t(part) * layout_.bucket(bucket).largest_part;
  }
  Status Reduce(size_t bucket, float scale);
  Status AllgatherSlots();
  Status SendReceiveSlots(int to, int from);
  // This rank's part from `source(run)` into its slot of every bucket of value_slots_.
  void StageOwnPart(const std::function<const float*(const ParameterRun&)>& source);
  // Part `part`'s runs from its slots of value_slots_ to `destination(run)` (NULL: not wanted).
  void ScatterPart(int part, const std::function<float*(const ParameterRun&)>& destination);

  Backend& backend_;
  CommunicationThread& thread_;
  int rank_;
  ReductionPlan plan_;
  ShardLayout layout_;
  std::vector<size_t> offsets_;  // each bucket's slots in the staging buffers
  std::vector<float> gradient_slots_, value_slots_;
};

// On the communication thread: every part of the bucket into its slot, then reduce_scatter in
// place, and this rank's slot scaled as the allreduce path scales (sum, then times `scale`).
Status ReduceScatterReduction::Reduce(size_t bucket, float scale) {
  const BucketLayout& layout = layout_.bucket(bucket);
  const size_t slot = layout.largest_part;
  if (slot == 0) return Status::Ok();
  for (int part = 0; part < layout_.parts(); ++part) {
    float* to = Slot(gradient_slots_, bucket, part);
    for (const ParameterRun& run : layout_.RunsOf(bucket, part)) {
      const float* from = HostData<const float>(plan_.gradients[run.parameter]) + run.offset;
      std::memcpy(to + (run.flat - layout.bounds[size_t(part)]), from,
                  run.elements * sizeof(float));
    }
  }
  int64_t all_shape[1] = {int64_t(slot * size_t(layout_.parts()))}, own_shape[1] = {int64_t(slot)};
  float* own = Slot(gradient_slots_, bucket, rank_);
  DLTensor all = HostTensor(Slot(gradient_slots_, bucket, 0), kFloat32, 1, all_shape);
  DLTensor mine = HostTensor(own, kFloat32, 1, own_shape);
  DPL_RETURN_IF_ERROR(backend_.ReduceScatter(&all, &mine, DPL_REDUCE_SUM, nullptr));
  const size_t count = layout.bounds[size_t(rank_) + 1] - layout.bounds[size_t(rank_)];
  for (size_t i = 0; i < count; ++i) own[i] *= scale;
  return Status::Ok();
}

Status ReduceScatterReduction::AllgatherSlots() {
  for (size_t b = 0; b < layout_.buckets(); ++b) {
    const size_t slot = layout_.bucket(b).largest_part;
    if (slot == 0) continue;
    int64_t all_shape[1] = {int64_t(slot * size_t(layout_.parts()))};
    int64_t own_shape[1] = {int64_t(slot)};
    DLTensor all = HostTensor(Slot(value_slots_, b, 0), kFloat32, 1, all_shape);
    DLTensor own = HostTensor(Slot(value_slots_, b, rank_), kFloat32, 1, own_shape);
    DPL_RETURN_IF_ERROR(backend_.Allgather(&own, &all, nullptr));
  }
  return Status::Ok();
}

void ReduceScatterReduction::StageOwnPart(
    const std::function<const float*(const ParameterRun&)>& source) {
  for (size_t b = 0; b < layout_.buckets(); ++b) {
    const BucketLayout& layout = layout_.bucket(b);
    float* own = Slot(value_slots_, b, rank_);
    for (const ParameterRun& run : layout_.RunsOf(b, rank_)) {
      std::memcpy(own + (run.flat - layout.bounds[size_t(rank_)]), source(run),
                  run.elements * sizeof(float));
    }
  }
}

void ReduceScatterReduction::ScatterPart(
    int part, const std::function<float*(const ParameterRun&)>& destination) {
  for (size_t b = 0; b < layout_.buckets(); ++b) {
    const BucketLayout& layout = layout_.bucket(b);
    const float* slot = Slot(value_slots_, b, part);
    for (const ParameterRun& run : layout_.RunsOf(b, part)) {
      float* to = destination(run);
      if (to == nullptr) continue;
      std::memcpy(to, slot + (run.flat - layout.bounds[size_t(part)]),
                  run.elements * sizeof(float));
    }
  }
}

Status ReduceScatterReduction::GatherParts(
    const std::function<const float*(const ParameterRun&)>& source,
    const std::function<float*(const ParameterRun&)>& destination, bool /*again*/) {
  StageOwnPart(source);
  DPL_RETURN_IF_ERROR(thread_.Run([this] { return AllgatherSlots(); }, {"allgather", -1, 0, 0}));
  for (int part = 0; part < layout_.parts(); ++part) {
    if (part != rank_) ScatterPart(part, destination);
  }
  return Status::Ok();
}

// Each bucket's slot of this rank to `to` and that of `from` from it, in one send_receive each.
Status ReduceScatterReduction::SendReceiveSlots(int to, int from) {
  for (size_t b = 0; b < layout_.buckets(); ++b) {
    int64_t shape[1] = {int64_t(layout_.bucket(b).largest_part)};
    if (shape[0] == 0) continue;
    DLTensor own = HostTensor(Slot(value_slots_, b, rank_), kFloat32, 1, shape);
    DLTensor theirs =
        HostTensor(Slot(value_slots_, b, from < 0 ? rank_ : from), kFloat32, 1, shape);
    DPL_RETURN_IF_ERROR(backend_.SendReceive(to < 0 ? nullptr : &own, to,
                                             from < 0 ? nullptr : &theirs, from, nullptr));
  }
  return Status::Ok();
}

// Backend ABI v5 moves a part to the one rank that wants it: a (world size - 1)-th of the bytes
// every rank receives in GatherParts' allgather.
Status ReduceScatterReduction::ExchangeParts(
    int to, int from, const std::function<const float*(const ParameterRun&)>& source,
    const std::function<float*(const ParameterRun&)>& destination) {
  if (!backend_.CanSendReceive()) {
    return GradientReduction::ExchangeParts(to, from, source, destination);
  }
  StageOwnPart(source);
  DPL_RETURN_IF_ERROR(
      thread_.Run([&] { return SendReceiveSlots(to, from); }, {"send_receive", -1, 0, 0}));
  if (from >= 0) ScatterPart(from, destination);
  return Status::Ok();
}

}  // namespace

std::unique_ptr<GradientReduction> AllreduceBuckets(Backend& backend, CommunicationThread& thread,
                                                    ReductionPlan plan) {
  return std::make_unique<AllreduceReduction>(backend, thread, std::move(plan));
}

std::unique_ptr<GradientReduction> ReduceScatterBuckets(Backend& backend,
                                                        CommunicationThread& thread, int rank,
                                                        int size, ReductionPlan plan) {
  return std::make_unique<ReduceScatterReduction>(backend, thread, rank, size, std::move(plan));
}

}  // namespace dpl::training
