// The sharded optimizer (--shard-optimizer, ZeRO stage 1): each rank keeps the optimizer state of
// one part of every gradient bucket and updates only that part.
//
// Note [Sharded optimizer]: the buckets are cut into parts (shard_layout.hpp); a rank's gradients
// are reduce-scattered so that it holds the averaged gradients of its part only, it runs the
// optimizer there, and the updated parameters are gathered back into every rank's model. The
// optimizer's arithmetic is element-wise and the same element for element, and the step's global
// quantities are shared as partial sums in a layout of their own (Note [Pieces]): the fp16
// overflow flag of each part, the clipping norm's sum of squares of each piece. So a sharded run
// gives the bits of an unsharded one. Two exchanges do it:
//  - through the machine's shared memory (the default on the CPU): one part per worker of the
//    machine, reduced in memory (Note [Reduction through shared memory]); with several machines
//    each machine holds every part once, as FSDP's hybrid sharding: the state is split among the
//    machine's workers and the machines do the same steps, so no parameter crosses machines;
//  - through the backend (--local-reduce backend): one part per rank, the buckets padded to equal
//    slots for reduce_scatter and an in-place allgather (dpl/backend.h).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "common/status.hpp"
#include "training/backend.hpp"
#include "training/communication_thread.hpp"
#include "training/gradient_sync.hpp"
#include "training/local_reduce.hpp"
#include "training/shard_layout.hpp"

namespace dpl::training {

class ShardExchange {
 public:
  virtual ~ShardExchange() = default;
  virtual const ShardLayout& layout() const = 0;
  // The part of every bucket this rank updates.
  virtual int part() const = 0;
  // Where the averaged gradients of `segment` (of this rank's part of `bucket`) are after the
  // step's reduction.
  virtual float* GradientOf(size_t bucket, const Segment& segment) = 0;
  // Adds up `values` over the ranks that share the parts; exact where one rank's entry at most
  // is not zero.
  virtual Status ShareEntries(std::vector<double>* values) = 0;
  // Every rank that shares the parts arrives before any leaves.
  virtual Status Barrier() = 0;
  // Every other part goes from its rank's `source` to this rank's `destination`
  // (LocalReducer::GatherParts). `again`: another gather follows at once.
  virtual Status GatherParts(const std::function<const float*(const Segment&)>& source,
                             const std::function<float*(const Segment&)>& destination,
                             bool again) = 0;
};

// The exchange through the machine's shared memory; `reducer` is sharded.
std::unique_ptr<ShardExchange> SharedMemoryExchange(LocalReducer* reducer);

// The buckets' reduction for the sharded optimizer through the backend: each bucket staged into
// world-size slots, reduce-scattered, this rank's slot scaled; and its exchange.
class BackendShard final : public BucketReduction, public ShardExchange {
 public:
  BackendShard(Backend* backend, CommunicationThread* thread, int rank,
               std::vector<DLTensor> gradients, ShardLayout layout);

  const char* name() const override { return "reduce_scatter"; }
  Status Reduce(size_t bucket, float scale) override;
  Status Finish() override { return Status::Ok(); }

  const ShardLayout& layout() const override { return layout_; }
  int part() const override { return rank_; }
  float* GradientOf(size_t bucket, const Segment& segment) override;
  Status ShareEntries(std::vector<double>* values) override;
  Status Barrier() override;
  Status GatherParts(const std::function<const float*(const Segment&)>& source,
                     const std::function<float*(const Segment&)>& destination, bool again) override;

 private:
  float* Slot(std::vector<float>& staging, size_t bucket, int part);

  Backend* backend_;
  CommunicationThread* thread_;
  int rank_;
  std::vector<DLTensor> gradients_;
  ShardLayout layout_;
  std::vector<size_t> offsets_;  // each bucket's slots in the staging buffers
  std::vector<float> gradient_slots_, value_slots_;
};

// The buckets' reduction through the machine's shared memory (Note [Reduction through shared
// memory]); with `await_sums`, Finish waits for every worker's part (an unsharded optimizer reads
// every gradient).
class SharedMemoryReduction final : public BucketReduction {
 public:
  SharedMemoryReduction(LocalReducer* reducer, std::vector<DLTensor> gradients, bool await_sums)
      : reducer_(reducer), gradients_(std::move(gradients)), await_sums_(await_sums) {}
  const char* name() const override { return "shared-memory reduce"; }
  void BeginStep() override { reducer_->BeginStep(); }
  Status Reduce(size_t bucket, float scale) override {
    return reducer_->ReduceBucket(bucket, gradients_, scale);
  }
  Status Finish() override { return await_sums_ ? reducer_->AwaitSums() : Status::Ok(); }

 private:
  LocalReducer* reducer_;
  std::vector<DLTensor> gradients_;
  bool await_sums_;
};

}  // namespace dpl::training
