// The reduction of one run's gradient buckets, as a path of the front makes it
// (Collectives::ReduceGradients): the collectives of each step, and what the optimizer reads
// afterwards.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "training/collectives/buckets.hpp"
#include "training/collectives/shard_layout.hpp"
#include "training/float_span.hpp"
#include "training/precision.hpp"

namespace dpl::training {

// What a run's gradients are and how they are to be summed.
struct ReductionPlan {
  // By parameter index: float32, compact, all in host memory or all on one device.
  std::vector<DLTensor> gradients;
  std::vector<Bucket> buckets;  // AssignBuckets over the gradients
  GradientWire wire;            // the format between ranks (precision.hpp)
  // kByCaller for device memory: the sums are left unscaled, in float32.
  GradientScaling scaling = GradientScaling::kInBucket;
  void* stream = nullptr;  // that produces device gradients (the model's; NULL: the default)
  // The optimizer updates this rank's part of every bucket only (--shard-optimizer): the sums of
  // the other parts are not needed here.
  bool sharded = false;
  // The gradients are a CPU model's own memory, updated in place: the workers of a machine may
  // sum them through its shared memory (--local-reduce shm).
  bool in_place = false;
  // The model's next backward replaces its gradients (Model: kReplacedGradients): the reduction
  // need not zero them behind its copy (Note [Reduction through shared memory], step 1).
  bool gradients_replaced = false;
  // Room for the machine's one copy of the values (Note [Shared parameters] in placement.hpp),
  // where the machine's shared memory sums.
  bool shared_values = false;
  // For the log: the bucket cap the buckets were made with, and where the gradients are ("in the
  // model's memory").
  int64_t bucket_cap_bytes = 0;
  std::string summed_in;
};

// Where the averaged gradients are once a step's reduction is finished.
enum class SumsLeft {
  // Every rank holds every averaged gradient where it was (an allreduce).
  kInEveryGradient,
  // The workers of a machine read every averaged gradient where they summed them, in their
  // shared memory; each scales its own part (Note [Scaling shared gradients] in update_share.hpp).
  kSharedByTheMachine,
  // This rank holds the averaged gradients of its own part of every bucket only (Note [Sharded
  // optimizer] in update_share.hpp).
  kOwnPartOnly,
};

class GradientReduction {
 public:
  virtual ~GradientReduction() = default;

  // How the gradients are summed, for rank 0's log line at the start.
  virtual std::string Describe() const = 0;

  // --- Each step; every rank makes the same calls in the same order. ---
  // A new step's reduction.
  virtual void BeginStep() {}
  // Starts reducing `bucket` on the front's communication thread, after what was started before,
  // and returns at once; the sums are multiplied by `scale` unless the plan said kByCaller.
  virtual std::future<Status> Launch(size_t bucket, float scale) = 0;
  // After every bucket was launched and its future waited for: whatever else the step's sums
  // need (a device's stream ordered after them; the other workers' parts of a machine).
  virtual Status Finish() = 0;

  // --- What the optimizer reads. ---
  virtual SumsLeft sums_left() const = 0;
  // The buckets cut into the parts of the ranks that share them (one part where nobody shares).
  virtual const ShardLayout& layout() const = 0;
  // The part of every bucket this rank sums (its index in layout()).
  virtual int part() const = 0;
  // Where the averaged gradients of `run` (a run of this rank's part of `bucket`, or with
  // kSharedByTheMachine of any part) are after the step's reduction.
  virtual float* GradientOf(size_t bucket, const ParameterRun& run) = 0;

  // --- The exchanges of the ranks that share the parts (kSharedByTheMachine, kOwnPartOnly), on
  // the front's thread; every such rank calls them in the same order. ---
  // Adds up `values` over those ranks; exact where one rank's entry at most is not zero.
  virtual Status ShareEntries(std::vector<double>* values) = 0;
  // Every one of those ranks arrives before any leaves.
  virtual Status Barrier(const char* what) = 0;
  // Every other rank's part goes from that rank's `source(run)` to this rank's
  // `destination(run)` (the run's first element; NULL: not wanted). `again`: another gather
  // follows at once.
  virtual Status GatherParts(const std::function<const float*(const ParameterRun&)>& source,
                             const std::function<float*(const ParameterRun&)>& destination,
                             bool again) = 0;
  // This rank's part from `source(run)` to rank `to` only, and rank `from`'s part into this
  // rank's `destination(run)` (-1: that side left out); every such rank calls it, each with its
  // own pair. Here a GatherParts, which moves every part to every rank; a reduction whose backend
  // sends to one rank (backend ABI v5's send_receive) moves only the two parts.
  virtual Status ExchangeParts(int /*to*/, int /*from*/,
                               const std::function<const float*(const ParameterRun&)>& source,
                               const std::function<float*(const ParameterRun&)>& destination) {
    return GatherParts(source, destination, /*again=*/false);
  }

  // --- The machine's shared memory (Note [Reduction through shared memory]); elsewhere none. ---
  // Whether the reduction leaves the model's gradients zero (it zeroed them behind its copy).
  virtual bool zeroes_gradients() const { return false; }
  // The machine's one copy of the parameters' values, `layout().elements()` floats in parameter
  // order (plan.shared_values); empty where there is none.
  virtual FloatSpan SharedValues() { return {}; }
  // Reads each worker's gradients from its area of the shared memory from now on, and returns this
  // worker's, where its model is to keep its gradients in parameter order (Note
  // [Gradients in shared memory]); empty where the reduction cannot read them there.
  virtual FloatSpan UseModelGradientArea() { return {}; }
};

}  // namespace dpl::training
