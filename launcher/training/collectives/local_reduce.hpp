// The reduction of gradient buckets through the memory a machine's workers share (--local-reduce
// shm, the default on the CPU).
//
// Note [Reduction through shared memory]: as NCCL and oneCCL do inside a node, the workers of a
// machine reduce-scatter each bucket in memory, and only the part a worker summed crosses
// machines. Per bucket, on its communication thread, worker l
//   1. copies its gradients in (its own area of the shared memory, in float32 whatever the wire)
//      and zeroes them behind the copy, a few KiB
//      at a time while they are in cache: the model's gradients are read nowhere else this step,
//      so the next step finds them zero without a pass of zero_gradients over the whole model
//      (on the 10M MLP, 2 processes x 1 thread: about 3 of the optimizer's 13 ms). A model whose
//      next backward replaces its gradients (DPL_MODEL_REPLACED_GRADIENTS) needs no zeroing:
//      the host calls its zero_gradients, which writes nothing, instead,
//   2. waits until every worker of the machine has copied the bucket in,
//   3. sums part l of the bucket (shard_layout.hpp) over the workers in local-rank order 0, 1, ...
//      in every element, into the shared sums: a fixed order, so every replica holds the same bits,
//   4. with several machines, allreduces that part with the workers of the same local rank on the
//      other machines (a backend instance of their own), then scales it; a 16-bit wire format
//      applies here only, to the part scaled first and rounded once (Note [16-bit gradients
//      between machines only] in precision.cpp),
//   5. marks part l of the bucket summed.
// The optimizer then reads the averaged gradients straight from the shared sums (no copy back
// into the model); with --shard-optimizer each worker reads only its own part.
// Before the next step writes a bucket again, every worker has copied that bucket in once more,
// which it does only after its optimizer step: so one area per bucket suffices, and every
// exchange of the sharded optimizer (update_share.hpp) is separated from the next by a reduction.
//
// Note [Gradients in shared memory]: a model with share_gradients keeps its gradients in its
// worker's input area from the start, in parameter order: a bucket's parameters are consecutive
// and ascending there (AssignBuckets), so the bucket is one run of it and step 1 copies nothing,
// it only marks the bucket. The others read it until the sums are awaited; the worker's next
// backward writes it only after its optimizer step, after that wait.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "training/collectives/abort_signal.hpp"
#include "training/collectives/backend.hpp"
#include "training/collectives/shard_layout.hpp"
#include "training/collectives/shared_memory.hpp"
#include "training/config.hpp"

namespace dpl::training {

// The workers of this machine, as the worker role knows them.
struct LocalGroup {
  int memory_fd = -1;  // Note [Shared memory of a machine]; -1: none
  int local_rank = 0;
  int local_world_size = 1;
  int machine = 0;  // a worker's rank is machine * local_world_size + local_rank
  int machines = 1;
  // The job's attempt (Note [A machine's shared memory over a regroup] in local_reduce.cpp): the
  // same number on every worker of the machine.
  uint32_t attempt = 0;
  // This local rank's workers of every machine, rank = machine (when machines > 1).
  Backend* across_machines = nullptr;
  std::chrono::milliseconds timeout{300000};  // --backend-timeout
  // Ends every wait in the shared memory once raised (Note [Aborting collectives]).
  std::shared_ptr<const AbortSignal> abort = std::make_shared<AbortSignal>();
};

class LocalReducer {
 public:
  // Maps the shared memory and meets the machine's other workers there. `layout` has one part per
  // worker. `wire`: kNone, kFp16 or kBf16, the format of the parts summed across machines (a
  // machine sums in float32 whatever it is). Room for `entries` doubles a worker shares per step
  // (ShareEntries), with `sharded` for a copy of the parameters (GatherParts), and with
  // `parameters` for the machine's one copy of the parameters' values (values()).
  static Result<std::unique_ptr<LocalReducer>> Create(const LocalGroup& group, ShardLayout layout,
                                                      WireFormat wire, bool sharded, size_t entries,
                                                      bool parameters = false);
  ~LocalReducer();

  const ShardLayout& layout() const { return layout_; }
  const LocalGroup& group() const { return group_; }

  // Step 1 copies the gradients without zeroing them: the model replaces them at its next
  // backward after zero_gradients (ModelCapability::kReplacedGradients), which the host then calls.
  void KeepGradients() { zero_behind_ = false; }
  bool zeroes_gradients() const { return zero_behind_ && !reads_model_gradients(); }
  // Note [Gradients in shared memory]: each worker's model keeps its gradients in the worker's
  // input area, in parameter order (ModelGradients), so step 1 copies nothing; the host zeroes
  // them through the model. False where it cannot be used.
  bool UseModelGradients();
  bool reads_model_gradients() const { return !direct_offsets_.empty(); }
  // Worker `worker`'s area for its model's gradients, layout().elements() floats.
  float* ModelGradients(int worker) const;

  // A new step: the next generation of every flag.
  void BeginStep() { ++generation_.step; }
  // Steps 1-5 of Note [Reduction through shared memory] for `bucket`, whose gradients are
  // `gradients` (host float32 tensors, by parameter index, left zero); the sums are multiplied
  // by `scale`.
  Status ReduceBucket(size_t bucket, const std::vector<DLTensor>& gradients, float scale);
  // Waits until every worker's part of every bucket is summed.
  Status AwaitSums();
  // Bucket `b`'s averaged gradients, in its flat order (Note [Bucket layout]).
  float* sums(size_t b) const;
  // The parameters' values every worker of the machine computes with (Note [Shared parameters]
  // in placement.hpp), in parameter order, back to back; NULL unless Create made room.
  float* values() const;

  // Every worker arrives before any leaves.
  Status Barrier(const char* what);
  // Adds `values` up over the machine's workers, in local-rank order (exact where at most one
  // worker's entry is not zero); every worker gets the totals.
  Status ShareEntries(std::vector<double>* values);
  // Each worker's own part of every bucket goes from `source(run)` to the others'
  // `destination(run)` (pointers to the run's first element), through the shared copy;
  // a worker's own part is not copied to its own destination, nor any part to a NULL one. With
  // `again`, the copy may be reused as soon as this returns (a barrier at the end).
  Status GatherParts(const std::function<const float*(const ParameterRun&)>& source,
                     const std::function<float*(const ParameterRun&)>& destination, bool again);

 private:
  LocalReducer(const LocalGroup& group, ShardLayout layout, WireFormat wire);
  Status Attach(uint64_t fingerprint);
  // What this worker left in the shared memory in an attempt before: its flags, its gradients.
  void ClearOwnAreas();
  std::atomic<uint32_t>& Flag(int worker, size_t index) const;
  // Worker `worker`'s float32 gradients of `bucket` in its area.
  float* Input(int worker, size_t bucket) const;
  PeerProcess Peer(int worker) const;
  Status WaitForAll(size_t flag, uint32_t target, const std::function<std::string()>& what);
  void CopyIn(size_t bucket, const std::vector<DLTensor>& gradients);
  Status SumPart(size_t bucket, float scale);

  // Where each area of the shared memory begins, in bytes from its start (Create lays them out).
  struct Areas {
    std::vector<size_t> bucket_offsets;  // in the inputs and sums: elements, each a multiple of 16
    size_t padded_elements = 0;          // of every bucket, each padded
    size_t entries = 0;                  // doubles a worker shares per step (ShareEntries)
    size_t flags_per_worker = 0;
    size_t flags = 0, inputs = 0, sums = 0, copy = 0, entries_at = 0;
    size_t values = 0;  // 0: no room for the values
  };
  // The generations the flags count: of the steps, and of the barriers.
  struct Generations {
    uint32_t step = 0;
    uint32_t barrier = 0;
  };

  LocalGroup group_;
  ShardLayout layout_;
  WireFormat wire_;                  // between machines only
  std::vector<uint16_t> wire_part_;  // a part rounded to the wire's 16 bits
  Areas areas_;
  std::unique_ptr<SharedMapping> mapping_;
  std::vector<pid_t> pids_;
  Generations generation_;
  bool zero_behind_ = true;
  // Note [Gradients in shared memory]: each bucket's first element in parameter order, where the
  // workers' models keep their gradients in their areas; empty where they are copied in.
  std::vector<size_t> direct_offsets_;
};

}  // namespace dpl::training
