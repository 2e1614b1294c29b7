#include "training/gradient_sync.hpp"

#include <algorithm>

#include "observability/tracer.hpp"

namespace dpl::training {

GradientSynchronizer::GradientSynchronizer(GradientReduction& reduction,
                                           std::vector<Bucket> buckets, size_t parameters)
    : reduction_(reduction),
      buckets_(std::move(buckets)),
      bucket_of_parameter_(parameters, 0),
      pending_(buckets_.size(), 0),
      parameter_ready_(parameters, false) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (uint32_t p : buckets_[b].parameter_indices) bucket_of_parameter_[p] = b;
  }
}

void GradientSynchronizer::BeginStep(float scale) {
  reduction_.BeginStep();
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
    launched_.push_back(reduction_.Launch(next_to_launch_++, scale_));
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
  if (first.ok()) first = reduction_.Finish();
  return first;
}

}  // namespace dpl::training
