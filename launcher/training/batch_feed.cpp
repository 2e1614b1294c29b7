#include "training/batch_feed.hpp"

#include <algorithm>

namespace dpl::training {

BatchFeed::BatchFeed(DataSplit& train, const TrainingConfig& config, const WorkerIdentity& identity,
                     int local_batch)
    : sampler_(std::make_unique<DistributedSampler>(
          train.count(), identity.world_size, identity.rank, config.seed, ShuffleMode::kShuffle,
          config.drop_last ? RemainderMode::kDrop : RemainderMode::kPad)),
      local_batch_(local_batch),
      prefetcher_(train) {}

Result<std::unique_ptr<BatchFeed>> BatchFeed::Create(Model& model, DataSplit& train,
                                                     const TrainingConfig& config,
                                                     const WorkerIdentity& identity,
                                                     int local_batch) {
  std::unique_ptr<BatchFeed> feed(new BatchFeed(train, config, identity, local_batch));
  const dpl_model_info& info = model.info();
  for (uint32_t slot = 0; slot < 2; ++slot) {
    DPL_RETURN_IF_ERROR(
        feed->buffers_[slot].Allocate(model, slot, local_batch, info.input, info.target));
  }
  return feed;
}

int64_t BatchFeed::SamplesOf(int64_t batch) const {
  return std::min<int64_t>(local_batch_, int64_t(indices_.size()) - batch * local_batch_);
}

void BatchFeed::StartEpoch(int64_t epoch, int64_t first, int64_t end) {
  indices_ = sampler_->EpochIndices(epoch);
  epoch_ = epoch;
  end_ = end;
  Prefetch(first);
}

// Starts gathering batch `batch` of the epoch into its buffer, when the run trains one.
void BatchFeed::Prefetch(int64_t batch) {
  if (batch >= end_) return;
  prefetcher_.Start(&buffers_[batch % 2], indices_.data() + batch * local_batch_, SamplesOf(batch),
                    epoch_);
}

Result<BatchBuffer*> BatchFeed::Take(int64_t batch, int64_t* samples) {
  *samples = SamplesOf(batch);
  DPL_RETURN_IF_ERROR(prefetcher_.Wait().WithContext("reading the training data"));
  Prefetch(batch + 1);  // into the other buffer, while this step runs
  return &buffers_[batch % 2];
}

}  // namespace dpl::training
