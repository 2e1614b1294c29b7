#include "training/shard.hpp"

#include <cstring>

#include "training/host_tensor.hpp"

namespace dpl::training {
namespace {

class LocalShardExchange final : public ShardExchange {
 public:
  explicit LocalShardExchange(LocalReducer* reducer) : reducer_(reducer) {}
  const ShardLayout& layout() const override { return reducer_->layout(); }
  int part() const override { return reducer_->group().local_rank; }
  float* GradientOf(size_t bucket, const Segment& segment) override {
    return reducer_->sums(bucket) + segment.flat;
  }
  Status ShareEntries(std::vector<double>* values) override {
    return reducer_->ShareEntries(values);
  }
  Status Barrier() override { return reducer_->Barrier("a step of the sharded optimizer"); }
  Status GatherParts(const std::function<const float*(const Segment&)>& source,
                     const std::function<float*(const Segment&)>& destination,
                     bool again) override {
    return reducer_->GatherParts(source, destination, again);
  }

 private:
  LocalReducer* reducer_;
};

constexpr DLDataType kFloat32{kDLFloat, 32, 1};

}  // namespace

std::unique_ptr<ShardExchange> SharedMemoryExchange(LocalReducer* reducer) {
  return std::make_unique<LocalShardExchange>(reducer);
}

BackendShard::BackendShard(Backend* backend, CommunicationThread* thread, int rank,
                           std::vector<DLTensor> gradients, ShardLayout layout)
    : backend_(backend),
      thread_(thread),
      rank_(rank),
      gradients_(std::move(gradients)),
      layout_(std::move(layout)) {
  size_t total = 0;
  for (size_t b = 0; b < layout_.buckets(); ++b) {
    offsets_.push_back(total);
    total += size_t(layout_.parts()) * layout_.bucket(b).largest_part;
  }
  gradient_slots_.assign(total, 0.0f);
  value_slots_.assign(total, 0.0f);
}

float* BackendShard::Slot(std::vector<float>& staging, size_t bucket, int part) {
  return staging.data() + offsets_[bucket] + size_t(part) * layout_.bucket(bucket).largest_part;
}

// On the communication thread: every part of the bucket into its slot, then reduce_scatter in
// place, and this rank's slot scaled as the allreduce path scales (sum, then times `scale`).
Status BackendShard::Reduce(size_t bucket, float scale) {
  const BucketLayout& layout = layout_.bucket(bucket);
  const size_t slot = layout.largest_part;
  if (slot == 0) return Status::Ok();
  for (int part = 0; part < layout_.parts(); ++part) {
    float* to = Slot(gradient_slots_, bucket, part);
    for (const Segment& segment : layout_.SegmentsOf(bucket, part)) {
      const float* from = HostData<const float>(gradients_[segment.parameter]) + segment.offset;
      std::memcpy(to + (segment.flat - layout.bounds[size_t(part)]), from,
                  segment.length * sizeof(float));
    }
  }
  int64_t all_shape[1] = {int64_t(slot * size_t(layout_.parts()))}, own_shape[1] = {int64_t(slot)};
  float* own = Slot(gradient_slots_, bucket, rank_);
  DLTensor all = HostTensor(Slot(gradient_slots_, bucket, 0), kFloat32, 1, all_shape);
  DLTensor mine = HostTensor(own, kFloat32, 1, own_shape);
  DPL_RETURN_IF_ERROR(backend_->ReduceScatter(&all, &mine, DPL_REDUCE_SUM, nullptr));
  const size_t count = layout.bounds[size_t(rank_) + 1] - layout.bounds[size_t(rank_)];
  for (size_t i = 0; i < count; ++i) own[i] *= scale;
  return Status::Ok();
}

float* BackendShard::GradientOf(size_t bucket, const Segment& segment) {
  const size_t first = layout_.bucket(bucket).bounds[size_t(rank_)];
  return Slot(gradient_slots_, bucket, rank_) + (segment.flat - first);
}

Status BackendShard::ShareEntries(std::vector<double>* values) {
  int64_t shape[1] = {int64_t(values->size())};
  DLTensor tensor = HostTensor(values->data(), DLDataType{kDLFloat, 64, 1}, 1, shape);
  return thread_
      ->Submit([&] { return backend_->Allreduce(&tensor, DPL_REDUCE_SUM, nullptr); },
               {"allreduce", -1, 0, values->size() * sizeof(double)})
      .get();
}

Status BackendShard::Barrier() {
  return thread_->Submit([&] { return backend_->Barrier(); }).get();
}

Status BackendShard::GatherParts(const std::function<const float*(const Segment&)>& source,
                                 const std::function<float*(const Segment&)>& destination,
                                 bool /*again*/) {
  for (size_t b = 0; b < layout_.buckets(); ++b) {
    const BucketLayout& layout = layout_.bucket(b);
    float* own = Slot(value_slots_, b, rank_);
    for (const Segment& segment : layout_.SegmentsOf(b, rank_)) {
      std::memcpy(own + (segment.flat - layout.bounds[size_t(rank_)]), source(segment),
                  segment.length * sizeof(float));
    }
  }
  const Status gathered =
      thread_
          ->Submit([&] {
            for (size_t b = 0; b < layout_.buckets(); ++b) {
              const size_t slot = layout_.bucket(b).largest_part;
              if (slot == 0) continue;
              int64_t all_shape[1] = {int64_t(slot * size_t(layout_.parts()))};
              int64_t own_shape[1] = {int64_t(slot)};
              DLTensor all = HostTensor(Slot(value_slots_, b, 0), kFloat32, 1, all_shape);
              DLTensor own = HostTensor(Slot(value_slots_, b, rank_), kFloat32, 1, own_shape);
              DPL_RETURN_IF_ERROR(backend_->Allgather(&own, &all, nullptr));
            }
            return Status::Ok();
          })
          .get();
  DPL_RETURN_IF_ERROR(gathered);
  for (size_t b = 0; b < layout_.buckets(); ++b) {
    const BucketLayout& layout = layout_.bucket(b);
    for (int part = 0; part < layout_.parts(); ++part) {
      if (part == rank_) continue;
      const float* slot = Slot(value_slots_, b, part);
      for (const Segment& segment : layout_.SegmentsOf(b, part)) {
        float* to = destination(segment);
        if (to == nullptr) continue;
        std::memcpy(to, slot + (segment.flat - layout.bounds[size_t(part)]),
                    segment.length * sizeof(float));
      }
    }
  }
  return Status::Ok();
}

}  // namespace dpl::training
