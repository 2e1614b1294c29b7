// The one front every collective of a worker goes through.
//
// Note [One front for collectives]: every collective a worker makes -- a gradient bucket, the
// sharded optimizer's reduce-scatter and gather of the updated parts, the broadcast of the initial
// parameters and buffers, a few numbers such as the epoch loss or the evaluation's totals, the
// preemption vote, the replica check's hashes, a barrier -- is a call on one object, Collectives,
// as every collective of a torch.distributed rank is a call on its ProcessGroup. Its calls run on
// one communication thread (communication_thread.hpp), in the order they were made: the backend
// ABI requires a backend's calls to be serialised, and a bucket is reduced there while backward
// goes on. Behind the front are its paths, each a Collectives too:
//  - the backend's (backend_collectives.hpp): the job's backend plugin, for tensors in the memory
//    it moves (host memory, or a device's);
//  - the machine's shared memory (shared_memory_collectives.hpp): the gradient buckets of a CPU
//    model's workers on one machine, summed in memory (Note [Reduction through shared memory]);
//    with several machines the per-machine hierarchy: each worker's part crosses machines
//    through the backend instance of its local rank's workers;
//  - the store's (store_collectives.hpp): a few numbers through the rendezvous store, for what a
//    backend cannot carry (one that moves device memory only, nccl: the preemption vote and the
//    replica hashes) and the sums that go through it whatever the backend (the epoch loss, the
//    evaluation's totals: added in rank order, the same bits on every backend);
//  - the host path (Note [A host path beside a device backend]): where the job's backend moves
//    device memory only and the job may regroup in place, a second backend instance of host
//    memory (gloo or tcp) carries the host tensors (a live state handed over) and the words the
//    store would carry otherwise;
//  - a world of one rank (OpenCollectives at world size 1): nothing to exchange.
// A path refuses what it cannot carry, naming itself. The attempt's front (OpenCollectives)
// chooses once which path carries each kind of call; a caller never picks between a backend, a
// store and a shared-memory area by itself. A new collective is one method here, its
// implementation in the paths that can carry it, and a test (docs/architecture.md).
//
// Note [Aborting collectives]: a front belongs to one attempt's membership (its ranks, its
// backend instances, its store prefix) and is never reused for another: a new membership opens a
// new front (OpenCollectives) over its own backend instances, and the parts of a step that hold a
// gradient reduction are rebuilt over it. Abort, from any thread, ends the front's collectives
// with its reason: what is queued on the thread ends without running, a wait in shared memory
// ends within a fraction of a second, and every later call fails at once. It also aborts the
// front's backend instances, the job's and, with several machines, the one of this local rank's
// workers across machines (Backend::Abort, backend ABI v4's abort, from this thread while the
// front's thread is blocked in the plugin): the call blocked there returns within a second,
// failing, and the instances are done for, as the front is. A plugin of an older ABI has no abort
// (BackendCapability::kAbort): a call blocked in it returns when the plugin gives up (its
// --backend-timeout), and the caller's wait for it ends then.
#pragma once

#include <dlpack/dlpack.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "observability/activity.hpp"
#include "training/collectives/gradient_reduction.hpp"
#include "training/collectives/local_reduce.hpp"

namespace dpl::rendezvous {
class StoreClient;
}

namespace dpl::training {

class Backend;

class Collectives {
 public:
  virtual ~Collectives() = default;

  // This rank's place among the ranks of its group, and their number.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // What its tensors travel through, for messages: the backend plugin's name ("gloo").
  virtual const std::string& name() const = 0;
  // Whether its tensor collectives move memory of `device` (where the gradients can be summed).
  virtual bool Reaches(const DLDevice& device) const = 0;

  // --- A few numbers; every rank calls with the same `name`, unique per use in the run. ---
  // Adds `values` element-wise over the ranks, in rank order; every rank gets the sums.
  virtual Status SumScalars(const std::string& name, std::vector<double>* values) = 0;
  // Every rank's `mine` (the same count on every rank): size() * mine.size() words, in rank order.
  virtual Result<std::vector<uint64_t>> GatherWords(const std::vector<uint64_t>& mine,
                                                    const std::string& name) = 0;
  // Whether any rank says yes in the vote `name` at `step`: the same answer on every rank. Every
  // rank votes once per step, in step order.
  virtual Result<bool> AnyRankSays(const std::string& name, int64_t step, bool yes) = 0;
  // Every rank arrives before any leaves; `what` names the barrier in messages.
  virtual Status Barrier(const std::string& what) = 0;

  // --- Tensors. ---
  // Rank `root`'s `tensors` to every rank (device tensors after the work on `stream`, which is
  // ordered after the broadcast); `activity` describes the call for stall reports and traces.
  virtual Status BroadcastTensors(const std::vector<DLTensor>& tensors, int root, void* stream,
                                  const observability::CollectiveActivity& activity) = 0;
  // The reduction of `plan`'s gradient buckets (gradient_reduction.hpp), run on this front's
  // thread.
  virtual Result<std::unique_ptr<GradientReduction>> ReduceGradients(ReductionPlan plan) = 0;

  // Note [Aborting collectives]: from any thread; the first reason wins.
  virtual void Abort(const Status& why) = 0;
};

// The ranks of one attempt and what they reach each other through: what a front is opened from.
struct Membership {
  int rank = 0;
  int world_size = 1;
  // The job's backend instance, connected (at world size 1 not used; may be NULL).
  Backend* backend = nullptr;
  // Where `backend` moves device memory only: an instance of host memory among the same ranks,
  // or NULL (Note [A host path beside a device backend]).
  Backend* host_path = nullptr;
  // This machine's workers and their shared memory, and with several machines the instance of
  // this local rank's workers across them (LocalGroup::across_machines).
  LocalGroup local;
  LocalReduce local_reduce = LocalReduce::kSharedMemory;  // --local-reduce
  // The rendezvous store and this attempt's prefix there (at world size 1 not used).
  rendezvous::StoreClient* store = nullptr;
  std::string store_prefix;
  std::chrono::milliseconds timeout{300000};  // --backend-timeout
};

// The front of one attempt (Note [One front for collectives]): the paths `membership` has, and
// which of them carries each kind of call. The backend instances and the store must outlive it.
Result<std::unique_ptr<Collectives>> OpenCollectives(const Membership& membership);

}  // namespace dpl::training
