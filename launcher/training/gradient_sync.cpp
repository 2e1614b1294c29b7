#include "training/gradient_sync.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/log.hpp"
#include "observability/activity.hpp"
#include "observability/stall_monitor.hpp"
#include "observability/tracer.hpp"
#include "training/host_tensor.hpp"
#include "training/precision.hpp"

namespace dpl::training {

std::vector<Bucket> AssignBuckets(const std::vector<size_t>& parameter_elements,
                                  int64_t bucket_cap_bytes) {
  std::vector<Bucket> buckets;
  Bucket current;
  for (size_t k = parameter_elements.size(); k-- > 0;) {
    current.parameter_indices.push_back(uint32_t(k));
    current.elements += parameter_elements[k];
    const int64_t cap =
        buckets.empty() ? std::min(kFirstBucketCapBytes, bucket_cap_bytes) : bucket_cap_bytes;
    if (int64_t(current.elements * sizeof(float)) >= cap) {
      buckets.push_back(std::move(current));
      current = Bucket();
    }
  }
  if (!current.parameter_indices.empty()) buckets.push_back(std::move(current));
  return buckets;
}

namespace {

uintptr_t AddressOf(const DLTensor& tensor) {
  return reinterpret_cast<uintptr_t>(tensor.data) + tensor.byte_offset;
}

// One 1-d tensor over the bucket's gradients when they lie back to back in index order (Note
// [Buckets in place]); the bucket's indices are consecutive, in reverse order.
std::optional<DLTensor> SpanOf(const std::vector<DLTensor>& gradients, const Bucket& bucket,
                               int64_t* shape) {
  uint32_t first = bucket.parameter_indices.front();
  for (uint32_t p : bucket.parameter_indices) first = std::min(first, p);
  for (uint32_t i = first; i + 1 < first + bucket.parameter_indices.size(); ++i) {
    const bool adjacent = AddressOf(gradients[i]) + ElementCount(gradients[i]) * sizeof(float) ==
                              AddressOf(gradients[i + 1]) &&
                          gradients[i].device.device_type == gradients[i + 1].device.device_type &&
                          gradients[i].device.device_id == gradients[i + 1].device.device_id;
    if (!adjacent) return std::nullopt;
  }
  DLTensor span = gradients[first];
  *shape = int64_t(bucket.elements);
  span.ndim = 1;
  span.shape = shape;
  span.strides = nullptr;
  return span;
}

}  // namespace

GradientSynchronizer::GradientSynchronizer(Backend* backend, CommunicationThread* thread,
                                           int world_size, std::vector<DLTensor> gradients,
                                           std::vector<Bucket> buckets,
                                           GradientCompression compression, GradientScaling scaling,
                                           void* stream)
    : backend_(backend),
      thread_(thread),
      world_size_(world_size),
      gradients_(std::move(gradients)),
      buckets_(std::move(buckets)),
      in_place_(buckets_.size()),
      host_memory_(gradients_.empty() || InHostMemory(gradients_.front().device)),
      compression_(compression),
      scaling_(scaling),
      stream_(stream),
      bucket_of_parameter_(gradients_.size(), 0),
      span_shapes_(buckets_.size()),
      pending_(buckets_.size(), 0),
      parameter_ready_(gradients_.size(), false) {
  size_t largest_staged = 0, largest = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (uint32_t p : buckets_[b].parameter_indices) bucket_of_parameter_[p] = b;
    in_place_[b] = SpanOf(gradients_, buckets_[b], &span_shapes_[b]);
    if (!in_place_[b]) largest_staged = std::max(largest_staged, buckets_[b].elements);
    largest = std::max(largest, buckets_[b].elements);
  }
  if (host_memory_) flat_.resize(largest_staged);
  if (host_memory_ && compression_ != GradientCompression::kNone) flat16_.resize(largest);
}

GradientSynchronizer::GradientSynchronizer(CommunicationThread* thread,
                                           std::vector<DLTensor> gradients,
                                           std::vector<Bucket> buckets, BucketReduction* reduction)
    : GradientSynchronizer(nullptr, thread, 1, std::move(gradients), std::move(buckets),
                           GradientCompression::kNone, GradientScaling::kInBucket) {
  reduction_ = reduction;
  std::vector<float>().swap(flat_);  // the reduction stages buckets its own way
}

void GradientSynchronizer::BeginStep(float scale) {
  if (reduction_ != nullptr) reduction_->BeginStep();
  std::lock_guard<std::mutex> lock(mutex_);
  active_ = true;
  scale_ = scale;
  next_to_launch_ = 0;
  launched_.clear();
  std::fill(parameter_ready_.begin(), parameter_ready_.end(), false);
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].parameter_indices.size();
}

void GradientSynchronizer::GradientReadyTrampoline(void* self, uint32_t index) {
  static_cast<GradientSynchronizer*>(self)->OnGradientReady(index);
}

void GradientSynchronizer::OnGradientReady(uint32_t index) {
  observability::Tracer& tracer = observability::Tracer::Global();
  if (tracer.enabled()) tracer.NoteGradientReady(std::chrono::steady_clock::now());
  std::lock_guard<std::mutex> lock(mutex_);
  if (!active_ || index >= parameter_ready_.size() || parameter_ready_[index]) return;
  parameter_ready_[index] = true;
  --pending_[bucket_of_parameter_[index]];
  LaunchReadyBucketsLocked();
}

void GradientSynchronizer::LaunchReadyBucketsLocked() {
  while (next_to_launch_ < buckets_.size() && pending_[next_to_launch_] == 0) {
    const size_t b = next_to_launch_++;
    observability::CollectiveActivity activity;
    activity.collective = reduction_ != nullptr ? reduction_->name() : "allreduce";
    activity.bucket = int32_t(b);
    activity.buckets = int32_t(buckets_.size());
    activity.bytes = buckets_[b].elements * sizeof(float);  // of gradients, before compression
    launched_.push_back(thread_->Submit([this, b] { return ReduceBucket(b); }, activity));
  }
}

Status GradientSynchronizer::FinishStep() {
  std::vector<std::future<Status>> launched;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::fill(pending_.begin(), pending_.end(), 0);
    LaunchReadyBucketsLocked();
    active_ = false;
    launched = std::move(launched_);
    launched_.clear();
  }
  Status first = Status::Ok();
  for (auto& f : launched) {
    Status s = f.get();
    if (first.ok() && !s.ok()) first = s;
  }
  // Device collectives may still run on the backend's own stream (backend ABI v2).
  if (first.ok() && !host_memory_) first = backend_->Synchronize(stream_);
  if (first.ok() && reduction_ != nullptr) first = AwaitReduction();
  return first;
}

Status GradientSynchronizer::AwaitReduction() {
  observability::CollectiveActivity activity;
  activity.collective = "shared-memory sums";
  activity.buckets = int32_t(buckets_.size());
  for (const auto& bucket : buckets_) activity.bytes += bucket.elements * sizeof(float);
  // The communication thread's calls of this step are over.
  return observability::StallMonitor::Global().Watch(activity,
                                                     [this] { return reduction_->Finish(); });
}

Status GradientSynchronizer::Allreduce(DLTensor tensor) {
  return backend_->Allreduce(&tensor, DPL_REDUCE_SUM, host_memory_ ? nullptr : stream_);
}

Status GradientSynchronizer::ReduceBucket(size_t bucket_index) {
  if (reduction_ != nullptr) return reduction_->Reduce(bucket_index, scale_);
  const Bucket& bucket = buckets_[bucket_index];
  const std::optional<DLTensor>& span = in_place_[bucket_index];
  if (!host_memory_) {
    // Device memory: the collectives are issued on the default stream after the work that
    // produced the gradients; the caller reads (and scales) them later, in stream order.
    if (span) return Allreduce(*span);
    for (uint32_t p : bucket.parameter_indices) DPL_RETURN_IF_ERROR(Allreduce(gradients_[p]));
    return Status::Ok();
  }
  if (span) {
    return ReduceHostFloats(HostData<float>(*span), bucket.elements);
  }
  float* flat = flat_.data();
  size_t offset = 0;
  for (uint32_t p : bucket.parameter_indices) {
    const size_t n = ElementCount(gradients_[p]);
    std::memcpy(flat + offset, HostData<const char>(gradients_[p]), n * sizeof(float));
    offset += n;
  }
  DPL_RETURN_IF_ERROR(ReduceHostFloats(flat, bucket.elements));
  offset = 0;
  for (uint32_t p : bucket.parameter_indices) {
    const size_t n = ElementCount(gradients_[p]);
    std::memcpy(HostData<char>(gradients_[p]), flat + offset, n * sizeof(float));
    offset += n;
  }
  return Status::Ok();
}

Status GradientSynchronizer::ReduceHostFloats(float* data, size_t elements) {
  const float scale = scaling_ == GradientScaling::kInBucket ? scale_ : 1.0f;
  if (compression_ != GradientCompression::kNone) {
    const bool half = compression_ == GradientCompression::kFp16;
    const Status status =
        AllreduceIn16Bits(*backend_, compression_, data, elements, scale, &flat16_);
    if (status.ok()) return Status::Ok();
    if (status.code() != DPL_ERR_UNSUPPORTED) return status;
    log::Warning("backend '" + backend_->name() + "' cannot allreduce " + (half ? "fp16" : "bf16") +
                 " tensors, so the gradients are sent as float32 for the rest of the run (" +
                 status.message() + ")");
    compression_ = GradientCompression::kNone;
  }
  int64_t shape[1] = {int64_t(elements)};
  DPL_RETURN_IF_ERROR(Allreduce(HostTensor(data, DLDataType{kDLFloat, 32, 1}, 1, shape)));
  if (scaling_ == GradientScaling::kInBucket) {
    for (size_t i = 0; i < elements; ++i) data[i] *= scale;
  }
  return Status::Ok();
}

}  // namespace dpl::training
