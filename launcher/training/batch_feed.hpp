// The training batches of one rank: the sampler's indices of each epoch (sampler.hpp), gathered
// into the model's host batch memory (batch_buffer.hpp), the next batch while a step runs
// (prefetch.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.hpp"
#include "training/batch_buffer.hpp"
#include "training/config.hpp"
#include "training/data.hpp"
#include "training/model.hpp"
#include "training/prefetch.hpp"
#include "training/sampler.hpp"
#include "training/worker_identity.hpp"

namespace dpl::training {

class BatchFeed {
 public:
  // The batches of `identity`'s rank of `train`, per-rank batch `local_batch`, in `model`'s two
  // host batch buffers (slots 0 and 1).
  static Result<std::unique_ptr<BatchFeed>> Create(Model& model, DataSplit& train,
                                                   const TrainingConfig& config,
                                                   const WorkerIdentity& identity, int local_batch);

  int local_batch() const { return local_batch_; }
  int64_t samples_per_rank() const { return sampler_->samples_per_rank(); }
  // A buffer that holds a batch (for evaluations between steps: the one a step has just used).
  BatchBuffer& buffer(int64_t batch) { return buffers_[batch % 2]; }

  // The epoch's indices, and the gathering of batch `first` started; batches [first, end) follow.
  void StartEpoch(int64_t epoch, int64_t first, int64_t end);
  // Waits for batch `batch` of the epoch, starts the next one into the other buffer, and returns
  // the batch's buffer; `*samples` is its sample count (the last batch may be short).
  Result<BatchBuffer*> Take(int64_t batch, int64_t* samples);
  // Waits for the gathering under way: none may outlive the epoch's indices.
  Status EndEpoch() { return prefetcher_.Wait(); }

 private:
  BatchFeed(DataSplit& train, const TrainingConfig& config, const WorkerIdentity& identity,
            int local_batch);
  int64_t SamplesOf(int64_t batch) const;
  void Prefetch(int64_t batch);

  std::unique_ptr<DistributedSampler> sampler_;
  int local_batch_;
  BatchBuffer buffers_[2];        // the step's and the next one's (slots 0 and 1)
  BatchPrefetcher prefetcher_;    // after the buffers: it must stop first
  std::vector<int64_t> indices_;  // of the epoch under way
  int64_t epoch_ = 0;
  int64_t end_ = 0;  // the epoch's batches this run trains end here
};

}  // namespace dpl::training
